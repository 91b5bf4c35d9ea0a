"""``make soak`` (``python -m soak.run``): real worker processes under chaos, verified by a ledger.

What it does, in order:

1. **A server.** By default a throwaway embedded cluster of its own
   (``workhorse.embedded.ensure_started(home=<tempdir>)``), which the chaos may restart and which
   is stopped at the end, also on an error or Ctrl-C. It is set to ``synchronous_commit = on``
   (``fsync`` stays off): an ``immediate`` restart crashes the server's processes, and with
   asynchronous commit it would forget commits it had acknowledged, the queue's and the
   ledger's, which the verdict would count as losses that no worker caused.
   ``--database-url URL`` uses that server instead, and then nothing restarts it
   (``"restarts": 0``, ``"server": "external"``; the soak's own writers still commit
   synchronously, the server's setting is left alone).
   ``WORKHORSE_DATABASE_URL`` is deliberately ignored: CI exports it for the test suite, and the
   soak wants a server it may restart. Only 127.0.0.1 is ever contacted.
2. **A fresh schema** (``soak_<random>``) for the queue (``workhorse migrate``) and the soak's
   ledger tables (``soak/sql.py``), dropped at the end unless ``--keep``.
3. **A fleet** of ``--workers`` processes, ``workhorse --app soak.soakapp:app worker
   --concurrency C --visibility-timeout V``, each logging to its own file in the log directory
   (printed on stderr; kept when the soak fails or with ``--keep``). The fleet is kept at N:
   a SIGKILLed or SIGTERMed worker is replaced by a fresh process at once.
4. **The chaos phase**, ``--seconds`` long: the arrivals and faults of ``soak/plan.py`` (drawn
   from ``--seed``), enqueued by ``soak/enqueue.py`` and injected by ``soak/chaos.py``, while
   ``soak/sampler.py`` samples the worker registry every half second.
5. **Wind-down**: no more faults, every frozen worker thawed, the fleet keeps running until every
   job is ``done`` or ``dead`` (at most 120 s plus the visibility timeout), then it is SIGTERMed.
6. **The verdict** (``soak/verify.py``), from the ledger and the event log: one JSON line on
   stdout (everything else goes to stderr), the details on stderr and in ``report.json`` in the
   log directory. Exit 1 on any lost job or concurrent duplicate, on a job still running past its
   lease plus the rescue bound at the end (``lapsed_past_bound_at_end``: checked one bound after
   the chaos, and after the wind-down), on a durable step that replayed a wrong answer (and,
   with ``--strict-registry``, on a healthy worker's registry row seen expired or missing); exit
   2 when the soak itself could not run.

``--flow`` turns features on (``soak/soakapp.py``): the app declares ``Limits(per_tenant=)``,
which counts the async jobs and not the sync ones (``tenant="none"``), and a third job runs
between two durable steps under a job cap. CI's short soak runs this mode.

The rescue bound (``RescueBound``): a lapsed lease is recovered within the worker's rescue
interval (``workhorse.leader.rescue.rescue_interval``), jittered by up to 10%, plus RESCUE_SLACK.

The defaults reproduce the outside soak that found the worker's defects, scaled to
``--seconds``: 3 workers at concurrency 8 with a 5 s visibility timeout, about 11 jobs a second
(4,000 over 6 minutes), a fault every 3-7 s, a server restart about every 2 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import workhorse
from soak import sql
from soak.chaos import Conductor, SoakAborted
from soak.db import FAILURES, Session
from soak.enqueue import BATCH_DEADLINE, Enqueuer
from soak.events import Clock, EventLog
from soak.fleet import DRAIN_TIMEOUT, REPO, Fleet
from soak.plan import Plan, default_jobs, make_plan
from soak.sampler import RegistryStats, Sampler
from soak.soakapp import build_app
from soak.verify import Inputs, analyse
from workhorse import embedded
from workhorse.leader.rescue import rescue_interval

log = logging.getLogger("soak")

SETTLE_TIMEOUT = 120.0  # plus the visibility timeout: how long the wind-down waits for every job
RESCUE_SLACK = 1.0  # seconds on top of the rescue interval (and its 10% jitter) for a turn to land


def rescue_bound(visibility: float) -> float:
    """Seconds past its lease a running job may stay before it counts as stranded."""
    return rescue_interval(visibility) * 1.1 + RESCUE_SLACK


REGISTER_TIMEOUT = 60.0
PROGRESS_EVERY = 10.0


@dataclass(frozen=True)
class Settings:
    seconds: float
    workers: int
    concurrency: int
    visibility: float
    jobs: int
    seed: int
    database_url: str | None
    keep: bool
    strict_registry: bool
    flow: bool = False

    @property
    def server(self) -> str:
        return "embedded" if self.database_url is None else "external"


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m soak.run",
        description="Chaos soak: worker processes under SIGKILL, SIGSTOP, SIGTERM, terminated sessions and "
        "server restarts, verified by an independent ledger. Prints one JSON line on stdout.",
    )
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the chaos phase (default 600)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--concurrency", type=int, default=8, help="--concurrency of each worker (default 8)")
    parser.add_argument("--visibility", type=float, default=5.0, help="--visibility-timeout in seconds (default 5)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs over the run (default: 4000 per 6 minutes)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the plan (default: random, printed)")
    parser.add_argument(
        "--database-url",
        default=None,
        help="use this server (127.0.0.1) instead of a throwaway embedded one; it is never restarted",
    )
    parser.add_argument("--keep", action="store_true", help="keep the schema, the log directory and the cluster")
    parser.add_argument(
        "--strict-registry", action="store_true", help="also fail when a healthy worker's registry row expired"
    )
    parser.add_argument(
        "--flow",
        action="store_true",
        help="declare flow control (per-tenant limits, a job cap; some jobs counted by no cap) and mix in "
        "jobs with durable steps",
    )
    args = parser.parse_args(argv)
    if args.seconds < 10 or args.workers < 1 or args.concurrency < 1 or args.visibility < 1:
        parser.error("expected --seconds >= 10, --workers >= 1, --concurrency >= 1, --visibility >= 1")
    if args.database_url is not None and "127.0.0.1" not in args.database_url and "localhost" not in args.database_url:
        parser.error("--database-url must point at 127.0.0.1: the soak only talks to this machine")
    return Settings(
        seconds=args.seconds,
        workers=args.workers,
        concurrency=args.concurrency,
        visibility=args.visibility,
        jobs=args.jobs if args.jobs is not None else default_jobs(args.seconds),
        seed=args.seed if args.seed is not None else secrets.randbelow(1_000_000),
        database_url=args.database_url,
        keep=args.keep,
        strict_registry=args.strict_registry,
        flow=args.flow,
    )


def src_version() -> str:
    """The commit of src/ the workers run, ``+dirty(<hash>)`` when the work tree differs from it;
    the directory, when ``workhorse`` is imported from elsewhere (a ``PYTHONPATH`` of an older tree)."""
    imported = Path(workhorse.__file__).resolve().parent.parent
    if imported != REPO / "src":
        return f"imported from {imported}"

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        except OSError:  # no git on this machine
            return ""
        return done.stdout

    commit = git("log", "-1", "--format=%h", "--", "src").strip() or "unknown"
    diff = git("diff", "HEAD", "--", "src")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "src").split()
    if not diff and not untracked:
        return commit
    digest = hashlib.sha1(diff.encode(), usedforsecurity=False)
    for name in sorted(untracked):
        with contextlib.suppress(OSError):
            digest.update(name.encode() + (REPO / name).read_bytes())
    return f"{commit}+dirty({digest.hexdigest()[:8]})"


@dataclass(frozen=True)
class Parts:
    """What ``prepare`` builds once the server is known."""

    fleet: Fleet
    sampler: Sampler
    enqueuer: Enqueuer
    conductor: Conductor


class Soak:
    """One soak, from its server to its verdict. ``run()`` answers the exit code."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.base = Path(tempfile.mkdtemp(prefix="workhorse-soak-"))
        self.base.chmod(0o711)  # as root, the embedded server runs as an unprivileged user who must traverse it
        self.logs = self.base / "logs"
        self.logs.mkdir()
        self.home: Path | None = None if settings.database_url else self.base / "cluster"
        self.schema = f"soak_{secrets.token_hex(4)}"
        self.lock_class = 1 + secrets.randbelow(2**30)
        self.clock = Clock()
        self.events = EventLog(self.clock, settings.visibility)
        self.plan: Plan = make_plan(
            settings.seconds, settings.jobs, settings.seed, restarts=settings.database_url is None, flow=settings.flow
        )
        self.bound = rescue_bound(settings.visibility)
        self.lapsed_at_end: list[int] = []  # jobs running past the bound: one bound after the chaos, at the end
        self.url = ""
        self.parts: Parts | None = None
        self.sessions: list[Session] = []
        self.t0 = time.monotonic()
        self.t0_db = 0.0
        self.failed = True
        self.src = src_version()  # replacements import the tree as it is when they spawn: compared at the end

    def session(self, name: str) -> Session:
        made = Session(self.url, self.schema, name)
        self.sessions.append(made)
        return made

    # -- phases -------------------------------------------------------------------------------

    def run(self) -> int:
        began = time.monotonic()
        try:
            self.prepare()
            self.start_fleet()
            self.chaos()
            settled = self.wind_down()
            stuck = self.stop_fleet()
            summary = self.verdict(settled, stuck, time.monotonic() - began)
        finally:
            self.cleanup()
        self.failed = not summary["ok"]
        print(json.dumps(summary, separators=(",", ":")), flush=True)
        self.discard()
        return 0 if summary["ok"] else 1

    def prepare(self) -> None:
        s = self.settings
        log.info(
            "soak: %gs, %d workers x %d, visibility %gs, %d jobs, seed %d, server %s, schema %s%s",
            s.seconds,
            s.workers,
            s.concurrency,
            s.visibility,
            self.plan.jobs,
            s.seed,
            s.server,
            self.schema,
            ", flow control and durable steps" if s.flow else "",
        )
        log.info("soak: logs in %s", self.logs)
        self.url = s.database_url or embedded.ensure_started(self.home)
        soak_app = build_app(self.url, self.schema, flow=s.flow)
        soak_app.app.migrate_sync()
        setup = self.session("soak-setup")
        if self.home is not None:
            setup.rows(sql.DURABLE_COMMITS)
        setup.rows(sql.CREATE_LEDGER)
        self.clock.calibrate(setup.raw())
        env = Fleet.environment(self.url, self.schema, self.lock_class, flow=s.flow)
        fleet = Fleet(
            size=s.workers,
            concurrency=s.concurrency,
            visibility=s.visibility,
            env=env,
            log_dir=self.logs,
            events=self.events,
        )
        enqueuer = Enqueuer(soak_app, self.url, self.plan.arrivals, self.clock)
        sampler = Sampler(self.session("soak-sampler"), fleet, self.events, s.visibility, self.bound)
        conductor = Conductor(
            plan=self.plan,
            fleet=fleet,
            events=self.events,
            session=self.session("soak-chaos"),
            enqueuer=enqueuer,
            home=self.home,
            seed=s.seed,
        )
        self.parts = Parts(fleet, sampler, enqueuer, conductor)

    def _parts(self) -> Parts:
        if self.parts is None:
            raise SoakAborted("the soak was not prepared")
        return self.parts

    def start_fleet(self) -> None:
        p = self._parts()
        for _ in range(self.settings.workers):
            p.fleet.spawn()
        p.sampler.start()
        deadline = time.monotonic() + REGISTER_TIMEOUT
        while any(m.first_seen is None for m in p.fleet.active()):
            if time.monotonic() > deadline:
                raise SoakAborted(f"the workers did not register within {REGISTER_TIMEOUT:g}s; see {self.logs}")
            p.conductor.housekeep()
            time.sleep(0.1)
        log.info("soak: %d workers registered", self.settings.workers)

    def chaos(self) -> None:
        p = self._parts()
        self.t0 = time.monotonic()
        self.t0_db = self.clock.now()
        p.enqueuer.start_at(self.t0)
        p.conductor.begin(self.t0)
        watch = self.session("soak-progress")
        end = self.t0 + self.settings.seconds
        next_report = self.t0 + PROGRESS_EVERY
        while time.monotonic() < end:
            p.conductor.run_until(min(next_report, end))
            if time.monotonic() >= next_report:
                self.report_progress(watch)
                next_report += PROGRESS_EVERY
        p.conductor.thaw_all()
        log.info("soak: chaos over after %.1fs; waiting for every job", time.monotonic() - self.t0)

    def report_progress(self, watch: Session) -> None:
        try:
            row = watch.one(sql.PROGRESS)
        except FAILURES:
            return
        faults = sum(1 for e in self.events.events("sigkill", "sigstop", "sigterm", "terminate", "restart"))
        log.info(
            "soak: t=%5.0fs  %d/%d jobs terminal, %d faults so far",
            time.monotonic() - self.t0,
            row["terminal"],
            row["jobs"],
            faults,
        )

    def wind_down(self) -> bool:
        """Keep the fleet running until every job is terminal; answers whether that happened."""
        p = self._parts()
        watch = self.session("soak-wind-down")
        deadline = time.monotonic() + BATCH_DEADLINE
        while not p.enqueuer.finished.is_set() and time.monotonic() < deadline:
            p.conductor.housekeep()
            time.sleep(0.1)
        p.enqueuer.halt.set()
        deadline = time.monotonic() + SETTLE_TIMEOUT + self.settings.visibility
        check_at = self.t0 + self.settings.seconds + self.bound  # every lease lapsed in the chaos is recovered
        row: dict[str, Any] = {"jobs": -1, "terminal": 0}
        while time.monotonic() < deadline:
            p.conductor.housekeep()
            if not self.lapsed_at_end and time.monotonic() >= check_at:
                self.lapsed_at_end.append(self.lapsed_past_bound(watch))
            with contextlib.suppress(*FAILURES):
                row = watch.one(sql.PROGRESS)
            if row["terminal"] == row["jobs"]:
                after = time.monotonic() - self.t0 - self.settings.seconds
                log.info("soak: every job terminal %.1fs after the chaos", after)
                if not self.lapsed_at_end:
                    time.sleep(max(check_at - time.monotonic(), 0))
                    self.lapsed_at_end.append(self.lapsed_past_bound(watch))
                self.lapsed_at_end.append(self.lapsed_past_bound(watch))
                return True
            time.sleep(0.25)
        missing = row["jobs"] - row["terminal"]
        log.warning("soak: %d of %d jobs still not terminal after the wind-down", missing, row["jobs"])
        return False

    def lapsed_past_bound(self, watch: Session) -> int:
        """Running jobs whose lease lapsed more than the rescue bound ago, now (-1: unreadable)."""
        try:
            found = watch.one(sql.LAPSED, {"bound": self.bound})
        except FAILURES:
            return -1
        if found["past"]:
            log.warning("soak: %d job(s) running past their lease plus %.1fs", found["past"], self.bound)
        return int(found["past"])

    def stop_fleet(self) -> list[int]:
        """SIGTERM the fleet and wait; answers the pids that had to be SIGKILLed."""
        p = self._parts()
        p.sampler.halt.set()
        p.sampler.join(timeout=5)
        stuck = p.fleet.shutdown(DRAIN_TIMEOUT + 10)
        for m in p.fleet.snapshot():
            if m.termed_at is not None and m.killed_at is None and m.returncode not in (0, None):
                log.warning(
                    "soak: worker %d (pid %d) exited %s after SIGTERM; log %s", m.seq, m.pid, m.returncode, m.log
                )
        return [m.pid for m in stuck]

    def verdict(self, settled: bool, stuck: list[int], elapsed: float) -> dict[str, Any]:
        """The JSON line (and report.json, and the details on stderr)."""
        p = self._parts()
        reader = self.session("soak-verify")
        inputs = Inputs(
            jobs=reader.rows(sql.FINAL_JOBS),
            ledger=reader.rows(sql.LEDGER),
            events=self.events.events(),
            members=p.fleet.snapshot(),
            visibility=self.settings.visibility,
            t0=self.t0_db,
        )
        found, details = analyse(inputs)
        registry = p.sampler.result()
        summary = self.summary(found, registry)
        steps = reader.rows(sql.STEPS)
        # an end check that could not read the table (-1), or never ran, counts as one: unverified
        stranded = sum(n if n >= 0 else 1 for n in self.lapsed_at_end) + max(2 - len(self.lapsed_at_end), 0)
        summary |= {
            "lapsed_past_bound_at_end": stranded,
            "rescue_bound_s": round(self.bound, 1),
            "worst_lapse_s": round(registry.worst_lapse, 3),
            "lapsed_past_bound_samples": len(registry.lapsed_past_bound),
            "flow": self.settings.flow,
            "step_runs": sum(r["runs"] for r in steps),
            "step_reruns": sum(r["runs"] - 1 for r in steps),
        }
        details["lapsed_past_bound"] = [
            {"t": round(t - self.t0_db, 2), "jobs": n, "oldest_s": round(oldest, 3)}
            for t, n, oldest in registry.lapsed_past_bound[:50]
        ]
        summary |= {
            "unexpected_exits": len(p.conductor.unexpected_exits),
            "enqueue_failed_batches": len(p.enqueuer.failed_batches),
            "settled_in_time": settled,
            "killed_at_shutdown": len(stuck),
            "clock_offset_ms": round(self.clock.offset * 1000, 3),
            "seed": self.settings.seed,
            "src": self.src,
            "src_changed_during_run": src_version() != self.src,
            "elapsed_s": round(elapsed, 1),
        }
        failed = summary["lost"] > 0 or summary["concurrent_duplicates"] > 0 or summary["step_mismatches"] > 0
        failed = failed or summary["lapsed_past_bound_at_end"] > 0
        summary["ok"] = not (failed or (self.settings.strict_registry and registry.issues))
        details["registry"] = [i.as_dict(self.t0_db) for i in registry.issues[:50]]
        worst = registry.worst_at
        details["worst_registry_age_at"] = (
            None if worst is None else {"t": round(worst[0] - self.t0_db, 2), "pid": worst[1]}
        )
        details["unexpected_exits"] = p.conductor.unexpected_exits
        waited_at = registry.worst_due_wait_at
        details["worst_due_wait_at"] = None if waited_at is None else round(waited_at - self.t0_db, 2)
        self.write_report(summary, details)
        return summary

    def summary(self, found: dict[str, Any], registry: RegistryStats) -> dict[str, Any]:
        s = self.settings
        head = ["jobs", "done", "dead", "dead_by_error", "lost", "concurrent_duplicates", "frozen_overlaps"]
        head += ["stale_starts"]
        head += ["stale_starts_called_after_thaw", "reruns"]
        tail = ["freezes_after_burst", "freezes_with_claimed_ahead", "runs", "open_runs", "stale_locks"]
        tail += ["lock_after_work", "final_attempt_unrecorded", "step_mismatches"]
        return {
            "ok": False,
            **{k: found[k] for k in head},
            "reruns_after_completed_body": found["reruns_after_completed_body"],
            "faults": found["faults"],
            "worst_registry_age_s": round(registry.worst_age, 3),
            "registry_expired_samples": len(registry.issues),
            "registry_healthy_samples": registry.healthy_samples,
            "worst_due_wait_s": round(registry.worst_due_wait, 3),
            "recovery_s": found["recovery_s"],
            "seconds": s.seconds,
            "workers": s.workers,
            "concurrency": s.concurrency,
            "visibility": s.visibility,
            "server": s.server,
            "restarts": found["faults"]["restart"],
            **{k: found[k] for k in tail},
        }

    def write_report(self, summary: dict[str, Any], details: dict[str, Any]) -> None:
        for name, items in details.items():
            if items:
                log.info("soak: %s: %s", name, json.dumps(items, default=str))
        events = [e.as_dict() | {"t": round(e.t - self.t0_db, 3)} for e in self.events.events()]
        workers = [
            {"worker": m.seq, "pid": m.pid, "log": str(m.log), "returncode": m.returncode, "ids": sorted(m.worker_ids)}
            for m in self._parts().fleet.snapshot()
        ]
        report = {"summary": summary, "details": details, "workers": workers, "events": events}
        (self.logs / "report.json").write_text(json.dumps(report, indent=1, default=str))

    # -- cleanup --------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Always: no worker left behind, the schema dropped (unless --keep), our server stopped."""
        if self.parts is not None:
            self.parts.enqueuer.halt.set()
            self.parts.sampler.halt.set()
            self.parts.fleet.abandon()
        if not self.settings.keep and self.url:
            with contextlib.suppress(*FAILURES):
                Session(self.url, self.schema, "soak-cleanup").rows(sql.DROP_SCHEMA)
        for session in self.sessions:
            with contextlib.suppress(*FAILURES):
                session.close()
        if self.home is not None:
            try:
                embedded.stop(self.home)
            except Exception as error:
                log.warning("soak: could not stop the embedded server in %s: %s", self.home, error)

    def discard(self) -> None:
        """The temp directory goes, unless --keep; on failure the logs stay."""
        if self.settings.keep:
            log.info("soak: kept %s (schema %s)", self.base, self.schema)
            return
        if self.failed:
            if self.home is not None:
                shutil.rmtree(self.home, ignore_errors=True)
            log.info("soak: logs kept in %s", self.logs)
            return
        shutil.rmtree(self.base, ignore_errors=True)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    signal.signal(signal.SIGTERM, _interrupted)
    soak = Soak(settings)
    try:
        return soak.run()
    except (SoakAborted, KeyboardInterrupt, Exception) as error:
        log.exception("soak: aborted")
        soak.discard()
        print(json.dumps({"ok": False, "error": repr(error), "logs": str(soak.logs)}), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
