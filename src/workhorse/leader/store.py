"""Where rounds go: the ``RoundStore`` protocol, and the store over a driver's leadership role.

A store runs a round (``round``), ends a lease (``release``), folds counters (``rollup``), rescues
lapsed leases (``rescue``), and,
when it can, wakes a standby on a released lease (``HandoverSource.open_handover``). The
scheduler's default is ``DriverRoundStore`` over the app's driver: on PostgreSQL a driver of its
own, one connection named ``workhorse:scheduler`` (``PostgresRoundStore``); the memory driver
refuses the role. Tests may pass their own store (a virtual clock).
"""

from __future__ import annotations

import asyncio
from typing import Protocol, runtime_checkable

from workhorse.drivers import refusals
from workhorse.drivers.base import Driver, RescueRole
from workhorse.leader.rounds import Handover, RoundAnswer, RoundRequest
from workhorse.types import Rescued


class StoreSource(Protocol):
    """What opening a store needs of the ``workhorse.App`` (this package never imports it)."""

    @property
    def is_memory(self) -> bool: ...

    @property
    def driver(self) -> Driver:
        """The driver for the calling event loop."""
        ...

    def postgres_driver(self, role: str, *, max_size: int = 10, generic_plans: bool = False) -> Driver:
        """A fresh Postgres driver whose connections are named ``workhorse:<role>``."""
        ...


class RoundStore(Protocol):
    """Where rounds go. ``DriverRoundStore`` by default; tests may pass their own."""

    async def check_schema(self) -> None: ...

    async def round(self, request: RoundRequest) -> RoundAnswer: ...

    async def release(self, holder: str, epoch: int) -> bool: ...

    async def rollup(self) -> int:
        """Fold old counter buckets (``Driver.rollup_counters``); answers rows folded."""

    async def rescue(self, batch: int) -> Rescued:
        """One batch of lapsed leases rescued (``RescueRole.rescue_lapsed``; none on a driver
        without the role)."""

    async def close(self) -> None: ...


@runtime_checkable
class HandoverSource(Protocol):
    """A store that can wake a standby when the lease is released (a store without it is polled)."""

    def open_handover(self, wake: asyncio.Event) -> Handover: ...


class DriverRoundStore:
    """Rounds through a driver's leadership role. ``owned``: the store closes the driver with it."""

    def __init__(self, driver: Driver, *, owned: bool) -> None:
        self.driver = driver
        self.owned = owned

    async def check_schema(self) -> None:
        await self.driver.check_schema()

    async def round(self, request: RoundRequest) -> RoundAnswer:
        return await self.driver.leader_round(request)

    async def release(self, holder: str, epoch: int) -> bool:
        return await self.driver.release_leader(holder, epoch)

    async def rollup(self) -> int:
        return await self.driver.rollup_counters()

    async def rescue(self, batch: int) -> Rescued:
        if isinstance(self.driver, RescueRole):
            return await self.driver.rescue_lapsed(batch)
        return Rescued([], [])  # the memory driver: its claim takes back its lapsed leases

    def open_handover(self, wake: asyncio.Event) -> Handover:
        return self.driver.open_handover(wake)

    async def close(self) -> None:
        if self.owned:
            await self.driver.close()


class PostgresRoundStore(DriverRoundStore):
    """Rounds on PostgreSQL, on a driver of their own: one connection named ``workhorse:scheduler``."""

    def __init__(self, app: StoreSource) -> None:
        super().__init__(app.postgres_driver("scheduler", max_size=1), owned=True)


def open_store(app: StoreSource) -> DriverRoundStore:
    """The scheduler's default store: a driver of its own on PostgreSQL. Cron leadership is
    PostgreSQL's alone: on the memory driver (a test double) it is refused, ``POSTGRES_ONLY``."""
    if app.is_memory:
        raise refusals.postgres_only("cron leadership (the scheduler role)")
    return PostgresRoundStore(app)
