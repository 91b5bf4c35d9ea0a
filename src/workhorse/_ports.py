"""What the parts an ``App`` is built from need of it, each as a narrow Protocol.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

from typing import Protocol

from workhorse.drivers.base import Driver


class DriverSource(Protocol):
    """What ``app.admin`` needs: the driver of the calling event loop."""

    @property
    def driver(self) -> Driver:
        """The driver for the calling event loop (psycopg async pools belong to one loop)."""
        ...


class EnqueuingApp(DriverSource, Protocol):
    """What a ``JobHandle`` needs to enqueue: the loop's driver, the synchronous callers' driver,
    and the payload limit."""

    @property
    def max_payload_bytes(self) -> int: ...

    def sync_driver(self) -> Driver:
        """The driver for synchronous callers (``enqueue_sync``)."""
        ...
