"""The clock a worker keeps its lease windows by.

A lease lapses on the database's clock whether or not this process was running: a SIGSTOP, a GC
pause, a VM migration or a laptop's sleep all let windows close while the worker saw nothing. So
every lease window (the time its claim or last renewal was sent, the heartbeat's schedule, the
checks before a run starts and before a settle is given up) is read from a clock that keeps
counting while the machine is suspended: ``CLOCK_BOOTTIME`` on Linux and ``CLOCK_MONOTONIC`` on
macOS (where ``time.monotonic`` stops during sleep on both). Elsewhere, ``time.monotonic``.
Durations that are not lease windows (a body's run time, back-off sleeps) stay on ``time.monotonic``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable


def _pick() -> Callable[[], float]:
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is None and sys.platform == "darwin":
        clock_id = getattr(time, "CLOCK_MONOTONIC", None)
    if clock_id is None:
        return time.monotonic
    try:
        time.clock_gettime(clock_id)
    except OSError:  # pragma: no cover - a kernel without it
        return time.monotonic
    return functools.partial(time.clock_gettime, clock_id)


lease_clock: Callable[[], float] = _pick()
"""Seconds on a clock that counts suspended time; only differences mean anything."""
