"""The conductor: injects the planned faults at their times, thaws frozen workers, keeps the fleet at N.

Each fault is logged with the server's clock (``EventLog``) before it is injected, together with
what the victim held at that moment (``held``: the ids of the jobs in state ``running`` under
the victim's worker id, so jobs claimed ahead are included; for a termination or a restart,
every running job). The verifier reads these for the rerun causes and the recovery times.

* ``sigkill``: SIGKILL a random active, unfrozen worker; a replacement is spawned at once.
* ``sigstop``: SIGSTOP one for 2-12 s (SIGCONT when due, or at the end of the chaos). At most
  N-1 workers are frozen at once. After a burst (``after_burst``), the target is the worker
  holding the most running rows once the burst landed, polled for up to 1.5 s: a worker holding
  more rows than its concurrency has jobs claimed ahead (``claimed_ahead`` in the event).
* ``sigterm``: SIGTERM one (it drains and exits); a replacement is spawned at once.
* ``terminate``: ``pg_terminate_backend`` of every queue session (``workhorse:*``) whose client
  port belongs to a fleet process (frozen and draining ones too); the ledger's sessions
  (``soak-ledger:*``) and the soak's own are spared.
* ``restart``: ``embedded.restart(home, mode)``, only when the server is the soak's own.

A worker that exits without being told to (a start refused while the server restarts, say) is
logged (``exit`` with its return code) and replaced; more than ``MAX_UNEXPECTED_EXITS`` of them
end the soak with an error, so a broken worker cannot make it spin.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

from soak import sql
from soak.db import FAILURES, Session
from soak.enqueue import Enqueuer
from soak.events import EventLog
from soak.fleet import Fleet, Member
from soak.plan import Fault, Plan
from soak.procfs import tcp_ports_of
from workhorse import embedded

log = logging.getLogger("soak")

TICK = 0.05
MAX_UNEXPECTED_EXITS = 40
BURST_POLL = 1.5  # seconds to look for the holder of a burst's jobs
LANDED_WAIT = 5.0


class SoakAborted(Exception):
    """The soak cannot go on (workers keep dying, the server does not come back)."""


class Conductor:
    def __init__(
        self,
        *,
        plan: Plan,
        fleet: Fleet,
        events: EventLog,
        session: Session,
        enqueuer: Enqueuer,
        home: Path | None,
        seed: int,
    ) -> None:
        self.plan = plan
        self.fleet = fleet
        self.events = events
        self.session = session
        self.enqueuer = enqueuer
        self.home = home
        self.rng = random.Random(seed + 1)
        self.t0 = time.monotonic()
        self._pending: list[Fault] = []
        self.unexpected_exits: list[dict[str, Any]] = []

    # -- the loop -----------------------------------------------------------------------------

    def begin(self, t0: float) -> None:
        """The chaos phase starts now (``t0``, monotonic): the plan's times count from here."""
        self.t0 = t0
        self._pending = list(self.plan.faults)

    def run_until(self, until: float) -> None:
        """Inject every planned fault that comes due before ``until`` (monotonic)."""
        while (now := time.monotonic()) < until:
            self.housekeep()
            while self._pending and self.t0 + self._pending[0].at <= now:
                self.inject(self._pending.pop(0))
            time.sleep(TICK)

    def housekeep(self) -> None:
        """Thaw what is due, note exits, keep N active workers."""
        for member in self.fleet.thaw_due(time.monotonic()):
            self.fleet.thaw(member)
            log.info("%s thaw worker %d (pid %d)", self._t(), member.seq, member.pid)
        for member in self.fleet.reap():
            if member.killed_at is None and member.termed_at is None:
                self._unexpected(member)
        while len(self.fleet.active()) < self.fleet.size:
            self.fleet.spawn()

    def thaw_all(self) -> None:
        for member in self.fleet.snapshot():
            if member.frozen:
                self.fleet.thaw(member)

    def _unexpected(self, member: Member) -> None:
        t = 0.0 if member.exited_at is None else member.exited_at
        during = self.events.disturbed_at(t)
        self.unexpected_exits.append(
            {"worker": member.seq, "pid": member.pid, "returncode": member.returncode, "disturbed": during}
        )
        log.warning(
            "%s worker %d (pid %d) exited on its own with %s%s; log %s",
            self._t(),
            member.seq,
            member.pid,
            member.returncode,
            " (during a restart or termination window)" if during else "",
            member.log,
        )
        if len(self.unexpected_exits) > MAX_UNEXPECTED_EXITS:
            raise SoakAborted(f"{len(self.unexpected_exits)} workers exited on their own; see {member.log}")

    def _t(self) -> str:
        return f"t={time.monotonic() - self.t0:6.1f}s"

    # -- faults -------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        if fault.kind == "restart":
            self._restart(fault)
        elif fault.kind == "terminate":
            self._terminate()
        elif fault.kind == "sigstop":
            self._freeze(fault)
        else:
            self._signal(fault)

    def _signal(self, fault: Fault) -> None:
        target = self._random_target(fault)
        if target is None:
            return
        held = self._held_by(target.pid)
        if fault.kind == "sigkill":
            self.fleet.kill(target, held=held, seq=target.seq)
        else:
            self.fleet.term(target, held=held, seq=target.seq)
        log.info("%s %s worker %d (pid %d), holding %s", self._t(), fault.kind, target.seq, target.pid, _n(held))
        self.fleet.spawn()

    def _freeze(self, fault: Fault) -> None:
        if sum(1 for m in self.fleet.snapshot() if m.frozen and m.alive) >= self.fleet.size - 1:
            self.events.add("skipped", fault=fault.kind, why="enough workers frozen")
            return
        target, claimed_ahead = (
            self._burst_holder(fault.after_burst) if fault.after_burst is not None else (None, False)
        )
        target = target or self._random_target(fault)
        if target is None:
            return
        held = self._held_by(target.pid)
        detail = {"held": held, "seq": target.seq, "freeze_s": round(fault.freeze_s, 2)}
        if fault.after_burst is not None:
            detail |= {"after_burst": fault.after_burst, "claimed_ahead": claimed_ahead}
        self.fleet.freeze(target, time.monotonic() + fault.freeze_s, **detail)
        log.info(
            "%s sigstop worker %d (pid %d) for %.1fs, holding %s%s",
            self._t(),
            target.seq,
            target.pid,
            fault.freeze_s,
            _n(held),
            " right after a burst" + (", jobs claimed ahead" if claimed_ahead else "")
            if fault.after_burst is not None
            else "",
        )

    def _burst_holder(self, batch: int) -> tuple[Member | None, bool]:
        """The worker holding the most running rows once burst ``batch`` landed, and whether it
        holds more than its concurrency (jobs claimed ahead)."""
        if self.enqueuer.wait_landed(batch, LANDED_WAIT) is None:
            return None, False
        best: tuple[int, Member] | None = None
        deadline = time.monotonic() + BURST_POLL
        while time.monotonic() < deadline:
            targets = {m.pid: m for m in self.fleet.targets()}
            try:
                holdings = self.session.rows(sql.HOLDINGS)
            except FAILURES:
                holdings = []
            for row in holdings:
                member = targets.get(row["pid"])
                if member is None:
                    continue
                if row["held"] > self.fleet.concurrency:
                    return member, True
                if best is None or row["held"] > best[0]:
                    best = (row["held"], member)
                break
            time.sleep(0.005)
        return (best[1] if best else None), False

    def _terminate(self) -> None:
        ports = sorted(tcp_ports_of([m.pid for m in self.fleet.alive()]))
        held = self._running()
        try:
            count = self.session.one(sql.TERMINATE_FLEET, {"ports": ports})["terminated"]
        except FAILURES as error:
            self.events.add("skipped", fault="terminate", why=str(error))
            return
        self.events.add("terminate", sessions=count, held=held)
        log.info("%s terminated %d worker sessions, %s running", self._t(), count, _n(held))

    def _restart(self, fault: Fault) -> None:
        if self.home is None:
            return
        held = self._running()
        event = self.events.add("restart", mode=fault.mode, held=held)
        self.session.close()
        began = time.monotonic()
        try:
            embedded.restart(self.home, mode=fault.mode)
        except Exception as error:
            raise SoakAborted(f"the server did not restart ({fault.mode}): {error}") from error
        event.detail["up_at"] = self.events.clock.now()
        event.detail["took_s"] = round(time.monotonic() - began, 3)
        log.info("%s restart (%s) took %.1fs, %s running", self._t(), fault.mode, time.monotonic() - began, _n(held))

    def _random_target(self, fault: Fault) -> Member | None:
        targets = self.fleet.targets()
        if not targets:
            self.events.add("skipped", fault=fault.kind, why="no target")
            return None
        return self.rng.choice(targets)

    def _held_by(self, pid: int) -> list[str] | None:
        try:
            return [r["id"] for r in self.session.rows(sql.HELD_BY, {"pid": pid})]
        except FAILURES:
            return None

    def _running(self) -> list[str] | None:
        try:
            return [r["id"] for r in self.session.rows(sql.RUNNING)]
        except FAILURES:
            return None


def _n(held: list[str] | None) -> str:
    return "? jobs" if held is None else f"{len(held)} jobs"
