"""Crash recovery as a stateful property (issue 26): hypothesis drives a real PostgreSQL schema
through enqueues with random caps and tenants, claims (by workers that serve some queues and know
some names), settles, crashes (a worker's leases forced to lapse: ``lease_expires_at`` moved into
the past, no sleeping), late settles and renewals of the crashed runs, pauses, resumes and rescues,
and checks after every step:

* no cap is exceeded: the running rows with live leases, counted per job name, key, tenant, queue
  and in total, are within the caps the claims were given (flow control on, when drawn);
* no job runs past its lease plus the rescue bound: every lapsed running row lapsed after the last
  rescue (a rescue leaves none);
* a crashed run's late settle or renewal lands only while its claim still holds the row.

At the end every queue is resumed, one rescue runs, and one worker that knows every name drains
the queues: every job ends final (done, dead or failed). Each example starts from empty tables of
one migrated schema; the whole run is bounded (MAX_EXAMPLES x STEPS) to stay well under a minute.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from workhorse import App
from workhorse.drivers.postgres import PostgresDriver
from workhorse.leader.rescue import RESCUE_BATCH
from workhorse.types import FlowRules, Lease, NewJob, Settlement

MAX_EXAMPLES = 30
STEPS = 30
NAMES = ("capped", "keyed", "free", "tenanted")  # capped by name, by key, by nothing, counted by tenant
QUEUES = ("q1", "q2")
WORKERS = ("w1", "w2", "w3")
VISIBILITY = 60.0  # no lease lapses by itself during a run: only a crash makes one lapse
RATE_PER = 0.05  # seconds of a drawn rate's window (short: the final drain waits for it)

T = TypeVar("T")


@dataclass
class Run:
    job_id: str
    worker: str
    claims: int


def machine_for(url: str, schema: str, driver: PostgresDriver, loop: asyncio.AbstractEventLoop) -> type[Any]:

    def wait(coroutine: Coroutine[Any, Any, T]) -> T:
        return loop.run_until_complete(coroutine)

    class RescueMachine(RuleBasedStateMachine):
        """One fleet's life on the schema; the driver is the code under test, the SQL here only looks."""

        def __init__(self) -> None:
            super().__init__()
            self.conn = psycopg.connect(url, autocommit=True)
            self.conn.execute(
                f"truncate {schema}.jobs, {schema}.counters, {schema}.flow_starts, {schema}.queue_pauses, "  # type: ignore[arg-type]
                f"{schema}.steps"
            )
            self.flow: FlowRules | None = None
            self.held: dict[str, Run] = {}  # live runs: claimed by a worker that did not crash
            self.zombies: list[Run] = []  # runs of crashed workers, that may still try to write
            self.crashed_since_rescue: set[str] = set()
            self.paused: set[str] = set()
            self.jobs = 0

        def teardown(self) -> None:
            try:
                self.drain()
            finally:
                self.conn.close()

        # -- the rules ----------------------------------------------------------------------------

        @initialize(
            flow_on=st.booleans(),
            name_cap=st.integers(1, 3),
            key_cap=st.integers(1, 2),
            per_tenant=st.none() | st.integers(1, 3),
            per_queue=st.none() | st.integers(1, 4),
            total=st.none() | st.integers(2, 6),
            rate=st.none() | st.integers(1, 4),
        )
        def caps(
            self,
            flow_on: bool,
            name_cap: int,
            key_cap: int,
            per_tenant: int | None,
            per_queue: int | None,
            total: int | None,
            rate: int | None,
        ) -> None:
            if flow_on:
                self.flow = FlowRules(
                    names={"capped": name_cap},
                    keyed={"keyed": (key_cap, False)},
                    per_tenant=per_tenant,
                    per_queue={} if per_queue is None else {"q2": per_queue},
                    total=total,
                    rate=None if rate is None else (rate, RATE_PER),
                )

        @rule(
            name=st.sampled_from(NAMES),
            queue=st.sampled_from(QUEUES),
            tenant=st.sampled_from(["a", "b"]),
            key=st.sampled_from(["k1", "k2"]),
            attempts=st.integers(1, 3),
        )
        def enqueue(self, name: str, queue: str, tenant: str, key: str, attempts: int) -> None:
            job = NewJob(
                id=str(uuid.uuid4()),
                name=name,
                queue=queue,
                tenant=None if name in ("free", "capped", "keyed") else tenant,
                payload="1",
                key=None,
                priority=0,
                max_attempts=attempts,
                dead_letter=attempts != 2,  # some end dead, some failed
                run_at=None,
                delay=0.0,
                flow_key=key if name == "keyed" else None,
            )
            wait(driver.enqueue_many([job]))
            self.jobs += 1

        @rule(
            worker=st.sampled_from(WORKERS),
            queues=st.sets(st.sampled_from(QUEUES), min_size=1),
            slots=st.integers(1, 3),
            names=st.sets(st.sampled_from(NAMES), min_size=1),
        )
        def claim(self, worker: str, queues: set[str], slots: int, names: set[str]) -> None:
            wants = dict.fromkeys(sorted(queues), slots)
            if self.flow is None:
                result = wait(driver.claim(worker_id=worker, wants=wants, names=sorted(names), visibility=VISIBILITY))
            else:
                result = wait(
                    driver.claim(
                        worker_id=worker, wants=wants, names=sorted(names), visibility=VISIBILITY, flow=self.flow
                    )
                )
            for c in result.claimed:
                assert c.queue in queues and c.name in names and c.queue not in self.paused
                self.held[c.id] = Run(c.id, worker, c.claims)
            for gone in [*result.buried, *result.refused]:
                assert gone.state in ("dead", "failed")

        @precondition(lambda self: bool(self.held))
        @rule(data=st.data(), outcome=st.sampled_from(["done", "retry", "dead", "interrupted"]))
        def settle(self, data: st.DataObject, outcome: str) -> None:
            run = self.held.pop(data.draw(st.sampled_from(sorted(self.held))))
            settled = Settlement(run.job_id, run.worker, run.claims, outcome, result="1")  # type: ignore[arg-type]
            assert wait(driver.settle([settled])) == [True], "a live run's settle lands"

        @rule(worker=st.sampled_from(WORKERS))
        def crash(self, worker: str) -> None:
            """The worker dies (or freezes) and its leases lapse."""
            runs = [r for r in self.held.values() if r.worker == worker]
            for run in runs:
                del self.held[run.job_id]
            self.zombies += runs
            rows = self.conn.execute(
                f"update {schema}.jobs set lease_expires_at = now() - interval '1 second' "  # type: ignore[arg-type]
                "where id = any(%s::uuid[]) and state = 'running' returning id::text",
                ([r.job_id for r in runs],),
            ).fetchall()
            self.crashed_since_rescue |= {r[0] for r in rows}

        @precondition(lambda self: bool(self.zombies))
        @rule(data=st.data(), renew=st.booleans())
        def late_write(self, data: st.DataObject, renew: bool) -> None:
            """A crashed run writes after all (a frozen worker thawed): it lands only while its
            claim still holds the row (nobody re-took, revoked or rescued it)."""
            run = self.zombies.pop(data.draw(st.integers(0, len(self.zombies) - 1)))
            holds = self.conn.execute(
                f"select count(*) from {schema}.jobs where id = %s and state = 'running' "  # type: ignore[arg-type]
                "and worker_id = %s and claims = %s",
                (run.job_id, run.worker, run.claims),
            ).fetchone()
            assert holds is not None
            if renew:
                beat = wait(driver.heartbeat(run.worker, [Lease(run.job_id, run.claims)], VISIBILITY))
                landed = run.job_id in beat.held
                if landed:  # thawed in time: its lease is live again, and it runs on
                    self.held[run.job_id] = run
            else:
                [landed] = wait(driver.settle([Settlement(run.job_id, run.worker, run.claims, "done", result="1")]))
            assert landed == bool(holds[0]), (run, holds)
            if landed:  # renewed or settled: no longer lapsed
                self.crashed_since_rescue.discard(run.job_id)

        @rule(queue=st.sampled_from(QUEUES))
        def pause(self, queue: str) -> None:
            self.conn.execute(
                f"insert into {schema}.queue_pauses (queue) values (%s) on conflict do nothing",  # type: ignore[arg-type]
                (queue,),
            )
            self.paused.add(queue)

        @rule(queue=st.sampled_from(QUEUES))
        def resume(self, queue: str) -> None:
            self.conn.execute(f"delete from {schema}.queue_pauses where queue = %s", (queue,))  # type: ignore[arg-type]
            self.paused.discard(queue)

        @rule()
        def rescue(self) -> None:
            while wait(driver.rescue_lapsed(RESCUE_BATCH)).count == RESCUE_BATCH:
                pass
            self.crashed_since_rescue.clear()

        # -- the invariants -----------------------------------------------------------------------

        @invariant()
        def no_cap_is_exceeded(self) -> None:
            flow = self.flow
            if flow is None:
                return
            rows = self.conn.execute(
                f"select name, queue, tenant, flow_key from {schema}.jobs "  # type: ignore[arg-type]
                "where state = 'running' and lease_expires_at >= now()"
            ).fetchall()
            counts: dict[tuple[str, Any], int] = {}
            for name, queue, tenant, key in rows:
                for scope in (("name", name), ("key", (name, key)), ("tenant", tenant), ("queue", queue), ("all", "")):
                    counts[scope] = counts.get(scope, 0) + 1
            for name, cap in flow.names.items():
                assert counts.get(("name", name), 0) <= cap, (name, counts)
            for key in ("k1", "k2"):
                assert counts.get(("key", ("keyed", key)), 0) <= flow.keyed["keyed"][0], counts
            if flow.per_tenant is not None:
                for tenant in ("a", "b"):
                    assert counts.get(("tenant", tenant), 0) <= flow.per_tenant, counts
            for queue, cap in flow.per_queue.items():
                assert counts.get(("queue", queue), 0) <= cap, counts
            if flow.total is not None:
                assert counts.get(("all", ""), 0) <= flow.total, counts

        @invariant()
        def nothing_runs_past_its_lease_and_one_rescue(self) -> None:
            lapsed = {
                r[0]
                for r in self.conn.execute(
                    f"select id::text from {schema}.jobs where state = 'running' and lease_expires_at < now()"  # type: ignore[arg-type]
                ).fetchall()
            }
            assert lapsed <= self.crashed_since_rescue, lapsed - self.crashed_since_rescue

        @invariant()
        def every_live_run_holds_its_row(self) -> None:
            if not self.held:
                return
            holding = self.conn.execute(
                f"select count(*) from {schema}.jobs as j join unnest(%s::uuid[], %s::text[], %s::int[]) "  # type: ignore[arg-type]
                "as h(id, worker, claims) on j.id = h.id and j.worker_id = h.worker and j.claims = h.claims "
                "where j.state = 'running'",
                (
                    [r.job_id for r in self.held.values()],
                    [r.worker for r in self.held.values()],
                    [r.claims for r in self.held.values()],
                ),
            ).fetchone()
            assert holding is not None and holding[0] == len(self.held)

        # -- the end ------------------------------------------------------------------------------

        def drain(self) -> None:
            """Resume, rescue once, then let a worker that knows every name run everything."""
            self.conn.execute(f"delete from {schema}.queue_pauses")  # type: ignore[arg-type]
            self.paused.clear()
            for run in self.held.values():  # the live runs finish
                wait(driver.settle([Settlement(run.job_id, run.worker, run.claims, "done", result="1")]))
            self.held.clear()
            self.rescue()
            deadline = time.monotonic() + 30
            while True:
                live = self.conn.execute(
                    f"select count(*) from {schema}.jobs where state in ('ready', 'delayed', 'running', 'suspended')"  # type: ignore[arg-type]
                ).fetchone()
                assert live is not None
                if live[0] == 0:
                    break
                assert time.monotonic() < deadline, f"{live[0]} job(s) never became final"
                wants = dict.fromkeys(QUEUES, 10)
                if self.flow is None:
                    result = wait(driver.claim(worker_id="drain", wants=wants, names=NAMES, visibility=VISIBILITY))
                else:
                    result = wait(
                        driver.claim(worker_id="drain", wants=wants, names=NAMES, visibility=VISIBILITY, flow=self.flow)
                    )
                if result.claimed:
                    done = [Settlement(c.id, "drain", c.claims, "done", result="1") for c in result.claimed]
                    assert all(wait(driver.settle(done)))
                else:
                    time.sleep(RATE_PER)  # a rate window reopening, or a retry coming due
            final = self.conn.execute(f"select count(*) from {schema}.jobs where state in ('done', 'dead', 'failed')")  # type: ignore[arg-type]
            row = final.fetchone()
            assert row is not None and row[0] == self.jobs

    return RescueMachine


def test_caps_and_the_rescue_bound_hold_through_crashes_pauses_and_rescues(database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    loop = asyncio.new_event_loop()
    driver = PostgresDriver(database_url, schema=schema, max_size=2)
    machine = machine_for(database_url, schema, driver, loop)
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=MAX_EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,  # the same examples every run: a failure reproduces, CI never flakes on a new one
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
            ),
        )
    finally:
        loop.run_until_complete(driver.close())
        loop.close()
