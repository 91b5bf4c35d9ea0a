"""The worker processes: spawned with ``workhorse --app soak.soakapp:app worker``, signalled, reaped.

Each worker is a real ``python -m workhorse`` process whose stdout and stderr go to its own log
file (``worker-<seq>-<pid>.log`` in the soak's log directory). A ``Member`` remembers what was
done to it, on the server's clock: when it was stopped and continued, SIGTERMed, SIGKILLed, when
it exited and how. The verifier reads these to tell a frozen holder from a live one.

The fleet is kept at N *active* workers: alive, neither SIGTERMed nor SIGKILLed. A frozen worker
still counts (it comes back when thawed); a worker that was SIGTERMed drains and exits on its
own beside its replacement.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.events import EventLog
from soak.soakapp import FLOW_ENV, LOCK_ENV, SCHEMA_ENV, URL_ENV

REPO = Path(__file__).resolve().parent.parent
APP_SPEC = "soak.soakapp:app"
DRAIN_TIMEOUT = 25.0  # the worker's default --drain-timeout


@dataclass
class Member:
    seq: int
    proc: subprocess.Popen[bytes]
    log: Path
    spawned_at: float
    stops: list[list[float]] = field(default_factory=list)  # [stopped_at, continued_at or inf]
    thaw_due: float = math.inf  # monotonic time of the planned SIGCONT
    killed_at: float | None = None
    termed_at: float | None = None
    exited_at: float | None = None
    returncode: int | None = None
    first_seen: float | None = None  # when its registry row was first seen
    worker_ids: set[str] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.exited_at is None

    @property
    def frozen(self) -> bool:
        return bool(self.stops) and math.isinf(self.stops[-1][1])

    @property
    def active(self) -> bool:
        return self.alive and self.killed_at is None and self.termed_at is None

    @property
    def died_at(self) -> float | None:
        """When it stopped running anything: its SIGKILL, else its observed exit."""
        return self.killed_at if self.killed_at is not None else self.exited_at

    def last_thaw(self) -> float:
        return max((s[1] for s in self.stops), default=-math.inf)

    def stopped_during(self, start: float, end: float) -> bool:
        """Was it stopped at any moment of [start, end]?"""
        return any(s[0] <= end and s[1] >= start for s in self.stops)

    def stopped_at(self, t: float) -> bool:
        return any(s[0] <= t <= s[1] for s in self.stops)


class Fleet:
    """N worker processes and the ones that were replaced. Thread-safe (the sampler reads it)."""

    def __init__(
        self,
        *,
        size: int,
        concurrency: int,
        visibility: float,
        env: dict[str, str],
        log_dir: Path,
        events: EventLog,
    ) -> None:
        self.size = size
        self.concurrency = concurrency
        self.visibility = visibility
        self.env = env
        self.log_dir = log_dir
        self.events = events
        self.members: list[Member] = []
        self.lock = threading.RLock()

    @staticmethod
    def environment(url: str, schema: str, lock_class: int, *, flow: bool = False) -> dict[str, str]:
        """The workers' environment: the soak's database and schema, never the caller's; with
        ``flow``, the app declares flow control and the steps job (``soakapp``)."""
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKHORSE_", "SOAK_"))}
        return env | {
            URL_ENV: url,
            SCHEMA_ENV: schema,
            LOCK_ENV: str(lock_class),
            FLOW_ENV: "1" if flow else "0",
            "WORKHORSE_DATABASE_URL": url,
            "PYTHONPATH": path,
        }

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "workhorse",
            "--app",
            APP_SPEC,
            "worker",
            "--concurrency",
            str(self.concurrency),
            "--visibility-timeout",
            f"{self.visibility:g}s",
            "--drain-timeout",
            f"{DRAIN_TIMEOUT:g}s",
            "--no-scheduler",
        ]

    def spawn(self) -> Member:
        with self.lock:
            seq = len(self.members) + 1
            log = self.log_dir / f"worker-{seq:03d}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    self.command(),
                    env=self.env,
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            member = Member(seq, proc, log.rename(self.log_dir / f"worker-{seq:03d}-{proc.pid}.log"), 0.0)
            member.spawned_at = self.events.add("spawn", proc.pid, seq=seq).t
            self.members.append(member)
            return member

    def snapshot(self) -> list[Member]:
        with self.lock:
            return list(self.members)

    def active(self) -> list[Member]:
        with self.lock:
            return [m for m in self.members if m.active]

    def targets(self) -> list[Member]:
        """Workers a fault may hit: active and not frozen."""
        with self.lock:
            return [m for m in self.members if m.active and not m.frozen]

    def alive(self) -> list[Member]:
        with self.lock:
            return [m for m in self.members if m.alive]

    def by_pid(self, pid: int) -> Member | None:
        with self.lock:
            return next((m for m in self.members if m.pid == pid), None)

    def kill(self, member: Member, **detail: Any) -> None:
        with self.lock:
            member.proc.send_signal(signal.SIGKILL)
            member.killed_at = self.events.add("sigkill", member.pid, **detail).t
            if member.frozen:
                member.stops[-1][1] = member.killed_at

    def term(self, member: Member, **detail: Any) -> None:
        with self.lock:
            member.proc.send_signal(signal.SIGTERM)
            member.termed_at = self.events.add("sigterm", member.pid, **detail).t

    def freeze(self, member: Member, thaw_due: float, **detail: Any) -> None:
        with self.lock:
            member.proc.send_signal(signal.SIGSTOP)
            member.stops.append([self.events.add("sigstop", member.pid, **detail).t, math.inf])
            member.thaw_due = thaw_due

    def thaw(self, member: Member) -> None:
        with self.lock:
            if not member.frozen:
                return
            if member.alive:
                member.proc.send_signal(signal.SIGCONT)
            member.stops[-1][1] = self.events.add("sigcont", member.pid).t
            member.thaw_due = math.inf

    def thaw_due(self, now: float) -> list[Member]:
        with self.lock:
            return [m for m in self.members if m.frozen and m.thaw_due <= now]

    def reap(self) -> list[Member]:
        """Members that exited since the last call (their exit is recorded)."""
        ended = []
        with self.lock:
            for m in self.members:
                if m.alive and m.proc.poll() is not None:
                    m.returncode = m.proc.returncode
                    m.exited_at = self.events.add("exit", m.pid, returncode=m.returncode, seq=m.seq).t
                    if m.frozen:
                        m.stops[-1][1] = m.exited_at
                    ended.append(m)
        return ended

    def shutdown(self, timeout: float) -> list[Member]:
        """SIGCONT and SIGTERM every live worker, wait up to ``timeout`` for them, SIGKILL the rest.
        Answers the workers that had to be killed."""
        for m in self.alive():
            self.thaw(m)
            if m.termed_at is None:
                self.term(m, why="end of soak")
        stuck = []
        deadline = time.monotonic() + timeout
        for m in self.alive():
            try:
                m.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.kill(m, why="did not exit after SIGTERM")
                m.proc.wait(timeout=10)
                stuck.append(m)
        self.reap()
        return stuck

    def abandon(self) -> None:
        """On an error or Ctrl-C: thaw and kill every worker still alive, now."""
        for m in self.alive():
            self.thaw(m)
            if m.proc.poll() is None:
                m.proc.kill()
            try:
                m.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        self.reap()
