"""Real `workhorse relay` subprocesses: SIGKILL between the queue's commit and the source's mark,
SIGKILL and terminated sessions at random while jobs keep being staged, SIGTERM drains, and what
an idle relay costs. The source and the queue are two databases of the test's own on the local
server (created and dropped here), so terminating their sessions disturbs nobody else."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from processkit import wait_for
from test_idle import statements

from workhorse import App, Outbox, WorkhorseError, embedded

pytestmark = pytest.mark.process
SCHEMA = "workhorse"
MARK_GATE = 4242  # the advisory lock the test's trigger makes a relay's mark wait for


def _url(base: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(base)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


@pytest.fixture
def queue_database(database_url: str) -> Iterator[str]:
    """A second database of the test's own: the queue (the source is ``dedicated_database``)."""
    name = f"whq_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create database {name}")  # type: ignore[arg-type]
    yield _url(database_url, name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        conn.execute(f"drop database if exists {name}")  # type: ignore[arg-type]


class Setup:
    """The queue migrated, the source's staging table installed, one job declared to stage."""

    def __init__(self, queue: str, source: str, logs: Path) -> None:
        self.queue, self.source, self.logs = queue, source, logs
        self.app = App(queue, schema=SCHEMA)
        self.app.migrate_sync()

        @self.app.job(name="relay.faults", tenant=lambda p: p["org"])
        def job(ctx: object, payload: object) -> None:
            return None

        self.job = job
        self.outbox = Outbox(self.app)
        with psycopg.connect(source) as conn:
            self.outbox.migrate_sync(conn)
        self.procs: list[subprocess.Popen[bytes]] = []

    def stage(self, count: int, *, commit: bool = True, conn: psycopg.Connection[Any] | None = None) -> list[str]:
        with contextlib.ExitStack() as stack:
            own = conn or stack.enter_context(psycopg.connect(self.source))
            refs = self.outbox.stage_many_sync(own, self.job, [{"org": f"o{i % 5}"} for i in range(count)])
            own.commit() if commit else own.rollback()
        return [r.id for r in refs]

    def relay(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"relay-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--schema", SCHEMA, "relay", "--source", self.source, *args],
            env={**os.environ, "WORKHORSE_DATABASE_URL": self.queue},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def jobs(self) -> list[str]:
        with psycopg.connect(self.queue) as conn:
            return [r[0] for r in conn.execute(f"select id::text from {SCHEMA}.jobs").fetchall()]

    def outcomes(self) -> dict[str, str | None]:
        with psycopg.connect(self.source) as conn:
            rows = conn.execute(f"select id::text, outcome from {SCHEMA}.outbox").fetchall()
        return {r[0]: r[1] for r in rows}

    def pending(self) -> int:
        with psycopg.connect(self.source) as conn:
            row = conn.execute(f"select count(*) from {SCHEMA}.outbox where published_at is null").fetchone()
        assert row is not None
        return int(row[0])

    def gate_marks(self) -> None:
        """A trigger (the test's, not workhorse's) that makes every mark wait on MARK_GATE."""
        with psycopg.connect(self.source, autocommit=True) as conn:
            conn.execute(
                f"""create function {SCHEMA}.gate() returns trigger language plpgsql as $$
                begin perform pg_advisory_xact_lock({MARK_GATE}); return new; end $$"""  # type: ignore[arg-type]
            )
            conn.execute(
                f"create trigger gate before update on {SCHEMA}.outbox for each row "  # type: ignore[arg-type]
                f"when (new.published_at is not null) execute function {SCHEMA}.gate()"
            )

    def ungate_marks(self) -> None:
        with psycopg.connect(self.source, autocommit=True) as conn:
            conn.execute(f"drop trigger gate on {SCHEMA}.outbox")  # type: ignore[arg-type]

    def relay_sessions(self) -> list[int]:
        """The pids of the relays' sessions on the source (one per relay once it is listening)."""
        name = psycopg.conninfo.conninfo_to_dict(self.source)["dbname"]
        with psycopg.connect(self.source, autocommit=True) as conn:
            rows = conn.execute(
                "select pid from pg_stat_activity where datname = %s and application_name = 'workhorse:relay'",
                (name,),
            ).fetchall()
        return [r[0] for r in rows]

    def terminate_relay_sessions(self) -> None:
        with psycopg.connect(self.source, autocommit=True) as conn:
            for pid in self.relay_sessions():
                conn.execute("select pg_terminate_backend(%s)", (pid,))

    def started(self, count: int = 1) -> None:
        """Until ``count`` relays are listening: their signal handlers are in place by then."""
        wait_for(lambda: len(self.relay_sessions()) >= count, 60, f"{count} relay(s) to start")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        asyncio.run(self.app.close())

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.logs / f"relay-{self.procs.index(proc)}.log").read_text(errors="replace")


@pytest.fixture
def setup(queue_database: str, dedicated_database: str, tmp_path: Path) -> Iterator[Setup]:
    made = Setup(queue_database, dedicated_database, tmp_path)
    yield made
    made.close()


def exactly_once(setup: Setup, committed: set[str]) -> None:
    jobs = setup.jobs()
    assert len(jobs) == len(set(jobs))
    assert set(jobs) == committed, (len(set(jobs) - committed), len(committed - set(jobs)))
    assert set(setup.outcomes()) == committed  # a rolled-back row never existed in the source either


def test_a_relay_killed_between_the_queue_commit_and_the_mark_moves_nothing_twice(setup: Setup) -> None:
    committed = set(setup.stage(50))
    setup.stage(10, commit=False)
    setup.gate_marks()
    with psycopg.connect(setup.source, autocommit=True) as gate:
        gate.execute("select pg_advisory_lock(%s)", (MARK_GATE,))
        first = setup.relay("--lease", "2s")
        wait_for(lambda: len(setup.jobs()) == 50, 60, "the queue to commit the batch")
        time.sleep(0.3)  # the relay now waits in its mark
        assert setup.pending() == 50
        first.kill()
        first.wait()
        # Its session still waits on the gate; the server ends it (rolling the mark back) once it
        # finds the client gone. Ended here, before the gate opens, as the server would end it.
        setup.terminate_relay_sessions()
    setup.ungate_marks()
    second = setup.relay("--lease", "2s", "--poll-interval", "1s")
    setup.started()
    wait_for(lambda: setup.pending() == 0, 60, "the second relay to mark the rows")
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, setup.output(second)
    exactly_once(setup, committed)
    assert set(setup.outcomes().values()) == {"present"}  # their ids were already jobs: nothing inserted twice


def test_sigterm_finishes_the_batch_in_flight_then_exits_0(setup: Setup) -> None:
    committed = set(setup.stage(30))
    setup.gate_marks()
    with psycopg.connect(setup.source, autocommit=True) as gate:
        gate.execute("select pg_advisory_lock(%s)", (MARK_GATE,))
        relay = setup.relay("--json")
        wait_for(lambda: len(setup.jobs()) == 30, 60, "the queue to commit the batch")
        relay.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert relay.poll() is None  # still finishing its batch
        gate.execute("select pg_advisory_unlock(%s)", (MARK_GATE,))
        assert relay.wait(timeout=30) == 0, setup.output(relay)
    assert setup.pending() == 0
    assert set(setup.outcomes().values()) == {"enqueued"}
    exactly_once(setup, committed)
    assert '"enqueued": 30' in setup.output(relay)  # --json: what it moved, at exit
    idle = setup.relay()
    setup.started()
    idle.send_signal(signal.SIGTERM)  # an idle relay stops at once
    assert idle.wait(timeout=15) == 0, setup.output(idle)


def test_killed_relays_and_terminated_sessions_lose_and_double_nothing(setup: Setup) -> None:
    """Relays SIGKILLed at random, every session of both databases terminated at random, while
    transactions keep staging (a fifth of them rolled back): at the end every committed staged row
    is exactly one job and no rolled-back row is any."""
    rng = random.Random(19)
    committed: set[str] = set(setup.stage(2000))
    setup.stage(200, commit=False)
    stop = threading.Event()
    errors: list[BaseException] = []

    def stager() -> None:
        try:
            with psycopg.connect(setup.source) as conn:
                while not stop.is_set():
                    keep = rng.random() >= 0.2
                    ids = setup.stage(rng.randint(1, 5), commit=keep, conn=conn)
                    if keep:
                        committed.update(ids)
                    time.sleep(0.01)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=stager)
    thread.start()
    relays = [setup.relay("--batch", "25", "--lease", "2s", "--poll-interval", "1s") for _ in range(2)]
    kills = terminations = 0
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.2, 0.8))
            if rng.random() < 0.6:
                victim = rng.randrange(len(relays))
                relays[victim].kill()
                relays[victim].wait()
                relays[victim] = setup.relay("--batch", "25", "--lease", "2s", "--poll-interval", "1s")
                kills += 1
            else:
                with psycopg.connect(setup.source, autocommit=True) as admin:
                    admin.execute(
                        "select pg_terminate_backend(pid) from pg_stat_activity "
                        "where datname = any(%s) and application_name like 'workhorse:%%' and pid <> pg_backend_pid()",
                        ([psycopg.conninfo.conninfo_to_dict(u)["dbname"] for u in (setup.queue, setup.source)],),
                    )
                terminations += 1
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    wait_for(lambda: setup.pending() == 0, 120, "the relays to move the rest")
    setup.started(len(relays))
    for proc in relays:
        proc.send_signal(signal.SIGTERM)
    for proc in relays:
        assert proc.wait(timeout=30) == 0, setup.output(proc)
    print(f"{kills} kills, {terminations} terminations, {len(committed)} committed rows")
    assert kills > 0 and terminations > 0
    exactly_once(setup, committed)


def test_an_idle_relay_stays_within_the_workers_budget_and_wakes_on_notify(setup: Setup) -> None:
    relay = setup.relay()
    setup.started()
    names = [psycopg.conninfo.conninfo_to_dict(u)["dbname"] for u in (setup.source, setup.queue)]
    admin = psycopg.conninfo.make_conninfo(
        **{**psycopg.conninfo.conninfo_to_dict(setup.source), "dbname": "postgres"}  # type: ignore[arg-type]
    )
    time.sleep(3.0)  # start-up is over: connected, checked, listening, purged once
    counts: dict[str, dict[str, int]] = {}
    threads = [
        threading.Thread(target=lambda n=name: counts.__setitem__(n, statements(admin, n, 60.0))) for name in names
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_minute = sum(sum(c.values()) for c in counts.values())
    print(f"idle relay: {counts} = {per_minute} statements per minute")
    assert counts[names[0]], "no statement seen on the source: the sampling is broken"
    assert per_minute <= 6, counts  # the worker's idle cost (README: 6 a minute)
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(timeout=15) == 0, setup.output(relay)


def test_a_commit_wakes_an_idle_relay_at_once_and_a_rollback_never(setup: Setup) -> None:
    relay = setup.relay("--poll-interval", "300s")  # any move within the test is the NOTIFY's doing
    setup.started()
    time.sleep(1.0)  # its first claim and purge are done
    setup.stage(3, commit=False)  # a rolled-back stage sends nothing
    started = time.monotonic()
    staged = setup.stage(1)
    wait_for(lambda: staged[0] in setup.jobs(), 10, "the NOTIFY to wake the relay")
    print(f"staged to queued: {time.monotonic() - started:.3f} s")
    assert setup.jobs() == staged
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(timeout=15) == 0, setup.output(relay)


def test_a_relay_rides_out_fast_and_immediate_restarts(own_server: tuple[Path, str], tmp_path: Path) -> None:
    """Source and queue on one server that restarts twice under a running relay while a
    transaction stages every few ms: a commit that failed with the server may or may not have
    landed, so the source's rows are the truth: each is exactly one job, and no row rolled back
    (or refused) is any."""
    home, url = own_server
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create database relay_source")
        conn.execute("create database relay_queue")
    setup = Setup(_url(url, "relay_queue"), _url(url, "relay_source"), tmp_path)
    try:
        setup.stage(300)
        relay = setup.relay("--batch", "20", "--lease", "2s", "--poll-interval", "1s")
        setup.started()
        rolled_back: set[str] = set()
        stop = threading.Event()

        def stager() -> None:
            rng = random.Random(7)
            while not stop.is_set():
                with (
                    contextlib.suppress(psycopg.Error, WorkhorseError),
                    psycopg.connect(setup.source, connect_timeout=2) as conn,
                ):
                    while not stop.is_set():
                        keep = rng.random() >= 0.2
                        ids = setup.outbox.stage_many_sync(conn, setup.job, [{"org": "o1"}] * rng.randint(1, 3))
                        if keep:
                            conn.commit()
                        else:
                            conn.rollback()
                            rolled_back.update(r.id for r in ids)
                        time.sleep(0.005)
                time.sleep(0.1)  # the server is restarting

        thread = threading.Thread(target=stager)
        thread.start()
        try:
            for mode in ("fast", "immediate"):
                time.sleep(1.5)
                embedded.restart(home, mode=mode)
                assert relay.poll() is None, "the relay died with the database"
            time.sleep(1.5)
        finally:
            stop.set()
            thread.join()
        wait_for(lambda: setup.pending() == 0, 120, "the relay to move everything after the restarts")
        setup.started()
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(timeout=30) == 0, setup.output(relay)
        staged = set(setup.outcomes())
        jobs = setup.jobs()
        assert len(jobs) == len(set(jobs)) and set(jobs) == staged
        assert not staged & rolled_back
        assert len(staged) > 300
        assert "failed (" in setup.output(relay)  # the restarts did reach it: it reconnected
    finally:
        setup.close()
