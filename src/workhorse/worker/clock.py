"""The clock a worker keeps its lease windows by.

Design: docs/how-it-works/architecture.md
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
