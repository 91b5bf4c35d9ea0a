"""What the parts an ``App`` is built from need of it, each as a narrow Protocol.

``app.py`` imports ``jobs``, ``tasks`` and ``admin``; they see the app only through these, so none
of them imports ``workhorse.app`` back. An ``App`` satisfies each (mypy checks it where app.py
hands itself over). What a task declaration needs (the job and task registries) lives in
``tasks.py``, beside the handles it names.
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
