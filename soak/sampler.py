"""The registry sampler: every half second, the ``workers`` table against the fleet.

A worker's registry row is renewed with its heartbeat (``last_seen_at``) and lives until
``expires_at`` (its visibility timeout later). The issue this soak checks: the row of a live
worker never expires while the worker is healthy and its database reachable, under any arrival
pattern. A worker process counts as *healthy* in a sample when it is alive, was neither
SIGTERMed nor SIGKILLed, is not stopped and was not stopped within the last visibility window,
no server restart or session termination happened within the last visibility window, and its
row was seen once already (or it started over 15 s ago). For each healthy worker the sample
records the row's age (``clock_timestamp() - last_seen_at``) and whether it is expired
(``expires_at < clock_timestamp()``) or missing.

It also samples how long the longest-waiting job has waited for a worker (``worst_due_wait_s``:
a due job since it became due, a running job since its lease lapsed; counted once the bulk
enqueued at the start has drained): a fleet that stops claiming while jobs wait shows there,
whatever the registry says.

And it samples the running jobs whose lease lapsed (``sql.LAPSED``): the oldest lapse seen
(``worst_lapse_s``), and the samples, outside a server restart or a session termination and the
bound after it, where some job had stayed running longer than its lease plus the rescue bound
(``lapsed_past_bound_samples``: a crashed worker's job nothing recovered in time).

Reported: the worst age among healthy workers (``worst_registry_age_s``) and the healthy-worker
samples whose row was expired or missing (``registry_expired_samples``); they fail the soak only
with ``--strict-registry``.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any

from soak import sql
from soak.db import FAILURES, Session
from soak.events import EventLog
from soak.fleet import Fleet, Member

INTERVAL = 0.5
REGISTER_GRACE = 15.0  # seconds a new worker may take to write its first row


@dataclass(frozen=True)
class RegistryIssue:
    t: float
    pid: int
    seq: int
    kind: str  # expired or missing
    age: float | None

    def as_dict(self, t0: float) -> dict[str, Any]:
        age = None if self.age is None else round(self.age, 3)
        return {"t": round(self.t - t0, 2), "pid": self.pid, "worker": self.seq, "kind": self.kind, "age_s": age}


@dataclass
class RegistryStats:
    rounds: int = 0
    failed_rounds: int = 0
    healthy_samples: int = 0
    worst_age: float = 0.0
    worst_at: tuple[float, int] | None = None  # (t, pid)
    worst_due_wait: float = 0.0  # the longest any due job had waited for a worker, sampled
    worst_due_wait_at: float | None = None
    worst_lapse: float = 0.0  # the longest any running job had been lapsed, sampled
    worst_lapse_at: float | None = None
    lapsed_past_bound: list[tuple[float, int, float]] = field(default_factory=list)  # (t, jobs, oldest)
    issues: list[RegistryIssue] = field(default_factory=list)


class Sampler(threading.Thread):
    def __init__(self, session: Session, fleet: Fleet, events: EventLog, visibility: float, bound: float) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.session = session
        self.fleet = fleet
        self.events = events
        self.visibility = visibility
        self.bound = bound  # seconds past its lease a running job may stay before it is recovered
        self.stats = RegistryStats()
        self.halt = threading.Event()
        self._lock = threading.Lock()
        self._drained = False

    def run(self) -> None:
        while not self.halt.wait(INTERVAL):
            self.sample()

    def sample(self) -> None:
        try:
            rows = self.session.rows(sql.REGISTRY)
            now = self.session.one(sql.CLOCK)["now"] if not rows else rows[0]["now"]
        except FAILURES:
            with self._lock:
                self.stats.failed_rounds += 1
            return
        by_pid: dict[int, dict[str, Any]] = {}
        for row in rows:
            by_pid[row["pid"]] = row
        with self._lock:
            self.stats.rounds += 1
            for member in self.fleet.snapshot():
                self._judge(member, by_pid.get(member.pid), float(now))
        self._sample_due(float(now))
        self._sample_lapsed()

    def _sample_lapsed(self) -> None:
        try:
            row = self.session.one(sql.LAPSED, {"bound": self.bound})
        except FAILURES:
            return
        now, oldest = float(row["now"]), float(row["oldest"])
        disturbed = any(w.start <= now <= w.end + self.bound for w in self.events.disturbed())
        with self._lock:
            if oldest > self.stats.worst_lapse:
                self.stats.worst_lapse, self.stats.worst_lapse_at = oldest, now
            if row["past"] and not disturbed:
                self.stats.lapsed_past_bound.append((now, int(row["past"]), oldest))

    def _sample_due(self, now: float) -> None:
        try:
            waited = float(self.session.one(sql.DUE_WAIT)["waited"])
        except FAILURES:
            return
        with self._lock:
            if not self._drained:  # the bulk at the start is a backlog, not a stall: count from its end
                self._drained = waited < 1.0
                return
            if waited > self.stats.worst_due_wait:
                self.stats.worst_due_wait, self.stats.worst_due_wait_at = waited, now

    def _judge(self, member: Member, row: dict[str, Any] | None, now: float) -> None:
        if row is not None:
            member.worker_ids.add(row["id"])
            if member.first_seen is None:
                member.first_seen = now
        if not self._healthy(member, now):
            return
        if member.first_seen is None and now - member.spawned_at < REGISTER_GRACE:
            return
        self.stats.healthy_samples += 1
        if row is None:
            self.stats.issues.append(RegistryIssue(now, member.pid, member.seq, "missing", None))
            return
        age = float(row["age"])
        if age > self.stats.worst_age:
            self.stats.worst_age, self.stats.worst_at = age, (now, member.pid)
        if row["expired"]:
            self.stats.issues.append(RegistryIssue(now, member.pid, member.seq, "expired", age))

    def _healthy(self, member: Member, now: float) -> bool:
        if not member.active or member.proc.poll() is not None:
            return False
        if member.frozen or now - member.last_thaw() < self.visibility:
            return False
        return not any(w.start <= now <= w.end for w in self.events.disturbed())

    def result(self) -> RegistryStats:
        with self._lock:
            return dataclasses.replace(
                self.stats, issues=list(self.stats.issues), lapsed_past_bound=list(self.stats.lapsed_past_bound)
            )
