"""Coalesced wake-ups for the single enqueue: at most one NOTIFY per queue per ``WAKE_WINDOW``.

The first enqueue of a window wakes in its own statement; the rest share one trailing wake sent
after they commit, outside any caller's transaction. Polling stays the guarantee.
Design: docs/how-it-works/performance.md (wake-ups and the commit lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger("workhorse.enqueue")

WAKE_WINDOW = 0.01  # seconds: at most one wake per queue per window, per driver


class WakeThrottle:
    """Which single enqueue wakes inline (``lead``) and the trailing wakes owed (``owe``)."""

    def __init__(self, send: Callable[[Sequence[str]], Awaitable[None]], window: float = WAKE_WINDOW) -> None:
        self._send = send
        self.window = window
        self._last: dict[str, float] = {}
        self._owed: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def lead(self, queue: str) -> bool:
        """True: this enqueue wakes inline (no wake for ``queue`` in the last window). False: it
        inserts without one and calls ``owe`` once it has committed."""
        now = time.monotonic()
        last = self._last.get(queue)
        if last is None or now - last >= self.window:
            self._last[queue] = now
            return True
        return False

    def owe(self, queue: str) -> None:
        """A job of ``queue`` committed without a wake: one is sent at the window's end."""
        self._owed.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._trail(), name="workhorse:wake")

    async def _trail(self) -> None:
        while self._owed:
            await asyncio.sleep(self.window)
            queues, self._owed = sorted(self._owed), set()
            now = time.monotonic()
            for queue in queues:
                self._last[queue] = now
            try:
                await self._send(queues)
            except Exception:  # a hint: the workers' poll finds the jobs
                log.debug("a trailing wake could not be sent", exc_info=True)

    async def close(self) -> None:
        """Send what is owed now, then stop (the driver is closing)."""
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._owed:
            queues, self._owed = sorted(self._owed), set()
            with contextlib.suppress(Exception):
                await self._send(queues)
