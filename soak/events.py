"""One clock and one event log for the whole soak.

Everything is compared on the database server's clock. The ledger rows carry
``clock_timestamp()``; the conductor's events are stamped with this process's wall clock moved by
the offset measured against the server at start (``Clock.calibrate``). The server is on
127.0.0.1, so the offset is the kernel's clock against itself (sub-millisecond, reported as
``clock_offset_ms``), but it is measured, not assumed.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from soak import sql


class Clock:
    """The server's clock, read locally: ``time.time()`` plus the measured offset."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.uncertainty = math.inf

    def calibrate(self, conn: psycopg.Connection[dict[str, Any]], rounds: int = 5) -> None:
        """Take the offset from the tightest of a few round trips (midpoint of each)."""
        for _ in range(rounds):
            before = time.time()
            row = conn.execute(sql.CLOCK).fetchone()
            after = time.time()
            if row is not None and (after - before) / 2 < self.uncertainty:
                self.uncertainty = (after - before) / 2
                self.offset = float(row["now"]) - (before + after) / 2

    def now(self) -> float:
        return time.time() + self.offset


@dataclass
class Event:
    """Something the conductor did or saw, on the server's clock (epoch seconds)."""

    t: float
    kind: str  # sigkill sigstop sigcont sigterm terminate restart spawn exit skipped
    pid: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 4), "kind": self.kind, "pid": self.pid, **self.detail}


@dataclass(frozen=True)
class Window:
    """A stretch of time during which the database was disturbed: a restart or a termination,
    and the visibility timeout after it (leases and registry rows may lapse legitimately)."""

    start: float
    end: float


class EventLog:
    """The conductor's log, shared with the sampler (thread-safe)."""

    def __init__(self, clock: Clock, visibility: float) -> None:
        self.clock = clock
        self.visibility = visibility
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, kind: str, pid: int | None = None, at: float | None = None, **detail: Any) -> Event:
        event = Event(self.clock.now() if at is None else at, kind, pid, detail)
        with self._lock:
            self._events.append(event)
        return event

    def events(self, *kinds: str) -> list[Event]:
        with self._lock:
            return [e for e in self._events if not kinds or e.kind in kinds]

    def disturbed(self) -> list[Window]:
        """Restarts (from their start until the server was back, plus a visibility window) and
        session terminations (plus a visibility window)."""
        windows: list[Window] = []
        for e in self.events("restart", "terminate"):
            until = float(e.detail.get("up_at", e.t))
            windows.append(Window(e.t, until + self.visibility))
        return windows

    def disturbed_at(self, t: float) -> bool:
        return any(w.start <= t <= w.end for w in self.disturbed())
