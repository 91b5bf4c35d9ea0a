"""A keyed enqueue whose key keeps changing hands: the driver inserts, finds the key held, looks
up the holder and finds it already finished, and inserts again. Another connection really does
take and finish the key between the driver's statements (the enqueue plan is the seam: every
statement still runs against PostgreSQL), so the loop's bound and its refusal are tested on the
real unique index, not on made-up rows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any

import psycopg
import pytest

from workhorse import App, DatabaseError, JobContext
from workhorse._db.queries import jobs as jobs_sql
from workhorse.drivers.postgres import PostgresDriver

KEY = "contended"


class Thief:
    """A second connection that takes the key just before each of the driver's inserts and
    finishes its job just before the driver's lookup, for the first ``rounds`` inserts."""

    def __init__(self, database_url: str, schema: str, rounds: int, *, finish: bool = True) -> None:
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.schema = schema
        self.rounds = rounds
        self.finish = finish
        self.inserts = 0
        self.lookups = 0
        self.holders: list[str] = []

    def before(self, driver: PostgresDriver, statement: str) -> None:
        if statement == driver.q(jobs_sql.INSERT_ONE):
            self.inserts += 1
            if self.inserts <= self.rounds:
                holder = str(uuid.uuid4())
                self.conn.execute(
                    f"insert into {self.schema}.jobs (id, name, queue, state, payload, idempotency_key, max_attempts)"  # type: ignore[arg-type]
                    " values (%s, 'task', 'default', 'ready', '{}', %s, 1)",
                    (holder, KEY),
                )
                self.holders.append(holder)
        elif statement == driver.q(jobs_sql.LIVE_BY_KEYS):
            self.lookups += 1
            if self.finish and self.inserts <= self.rounds:
                self.conn.execute(
                    f"update {self.schema}.jobs set state = 'done', finished_at = now() where id = %s",  # type: ignore[arg-type]
                    (self.holders[-1],),
                )
        else:
            raise AssertionError(f"unexpected statement in the keyed enqueue: {statement}")

    def states(self) -> dict[str, str]:
        rows = self.conn.execute(f"select id::text, state from {self.schema}.jobs").fetchall()  # type: ignore[arg-type]
        return {row[0]: row[1] for row in rows}


def interleave(
    monkeypatch: pytest.MonkeyPatch, driver: PostgresDriver, before: Callable[[PostgresDriver, str], None]
) -> None:
    """Run ``before`` ahead of every statement of the driver's keyed-enqueue plan."""
    plan = driver._enqueue_plan

    def wrapped(jobs: Any) -> Generator[Any, list[dict[str, Any]], Any]:
        inner = plan(jobs)
        statement = next(inner)
        while True:
            before(driver, statement[0])
            rows = yield statement
            try:
                statement = inner.send(rows)
            except StopIteration as done:
                return done.value

    monkeypatch.setattr(driver, "_enqueue_plan", wrapped)


@pytest.fixture
def task(pg_app: App):  # type: ignore[no-untyped-def]
    @pg_app.job(name="task", tenant="none")
    async def task(ctx: JobContext, payload: object) -> None:
        return None

    return task


@pytest.fixture
def thief_for(database_url: str, pg_app: App) -> Iterator[Callable[..., Thief]]:
    made: list[Thief] = []

    def make(rounds: int, finish: bool = True) -> Thief:
        made.append(Thief(database_url, pg_app.schema, rounds, finish=finish))
        return made[-1]

    yield make
    for thief in made:
        thief.conn.close()


async def enqueue(pg_app: App, task: Any, via: str, monkeypatch: pytest.MonkeyPatch, thief: Thief) -> Any:
    if via == "async":
        driver = pg_app.driver
        assert isinstance(driver, PostgresDriver)
        interleave(monkeypatch, driver, thief.before)
        return await task.enqueue({"n": 1}, key=KEY)
    sync_driver = pg_app.sync_driver()
    assert isinstance(sync_driver, PostgresDriver)
    interleave(monkeypatch, sync_driver, thief.before)
    return await asyncio.to_thread(task.enqueue_sync, {"n": 1}, key=KEY)


@pytest.mark.parametrize("via", ["async", "sync"])
async def test_a_key_that_keeps_changing_hands_is_refused(
    pg_app: App, task: Any, thief_for: Callable[..., Thief], monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    thief = thief_for(3)
    with pytest.raises(DatabaseError) as refused:
        await enqueue(pg_app, task, via, monkeypatch, thief)
    assert refused.value.code == "ENQUEUE_KEY_CONTENDED"
    assert refused.value.cause == (
        "an idempotency key kept changing hands while enqueueing (held, then finished, three times)"
    )
    assert refused.value.fix == "retry the enqueue"
    assert (thief.inserts, thief.lookups) == (3, 3)
    # Nothing of ours was written: the only rows are the thief's three finished holders.
    assert thief.states() == dict.fromkeys(thief.holders, "done")

    # The fix works: once the key stops changing hands, the same enqueue goes through.
    thief.rounds = 0
    thief.inserts = thief.lookups = 0
    ref = await (
        task.enqueue({"n": 1}, key=KEY) if via == "async" else asyncio.to_thread(task.enqueue_sync, {"n": 1}, key=KEY)
    )
    assert not ref.duplicate
    assert thief.states()[ref.id] == "ready"


@pytest.mark.parametrize("via", ["async", "sync"])
@pytest.mark.parametrize("rounds", [1, 2])
async def test_a_key_that_changed_hands_fewer_than_three_times_is_inserted(
    pg_app: App,
    task: Any,
    thief_for: Callable[..., Thief],
    monkeypatch: pytest.MonkeyPatch,
    via: str,
    rounds: int,
) -> None:
    thief = thief_for(rounds)
    ref = await enqueue(pg_app, task, via, monkeypatch, thief)
    assert not ref.duplicate
    assert ref.id not in thief.holders
    assert (thief.inserts, thief.lookups) == (rounds + 1, rounds)
    assert thief.states() == dict.fromkeys(thief.holders, "done") | {ref.id: "ready"}


@pytest.mark.parametrize("via", ["async", "sync"])
async def test_a_key_still_held_answers_its_holder(
    pg_app: App, task: Any, thief_for: Callable[..., Thief], monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """The harness's control: a holder taken but not finished is a duplicate, not a retry."""
    thief = thief_for(1, finish=False)
    ref = await enqueue(pg_app, task, via, monkeypatch, thief)
    assert ref.duplicate
    assert [ref.id] == thief.holders
    assert (thief.inserts, thief.lookups) == (1, 1)
    assert thief.states() == {thief.holders[0]: "ready"}


async def test_a_batch_inserts_again_only_the_jobs_whose_holder_finished(
    pg_app: App, task: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One key changes hands, one stays held, one job has no key: the second insert carries only
    the job whose holder finished, and every ref answers what the database holds."""
    seen: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as other:

        def holder(key: str) -> str:
            found = str(uuid.uuid4())
            other.execute(
                f"insert into {pg_app.schema}.jobs (id, name, queue, state, payload, idempotency_key, max_attempts)"  # type: ignore[arg-type]
                " values (%s, 'task', 'default', 'ready', '{}', %s, 1)",
                (found, key),
            )
            return found

        held = holder("held")
        moving: list[str] = []

        def before(driver: PostgresDriver, statement: str) -> None:
            kind = {
                driver.q(jobs_sql.INSERT_MANY): "insert_many",
                driver.q(jobs_sql.INSERT_ONE): "insert_one",
                driver.q(jobs_sql.LIVE_BY_KEYS): "lookup",
            }[statement]
            seen.append(kind)
            if kind == "insert_many":
                moving.append(holder("moving"))
            elif kind == "lookup" and len(seen) == 2:
                other.execute(
                    f"update {pg_app.schema}.jobs set state = 'done' where id = %s",  # type: ignore[arg-type]
                    (moving[0],),
                )

        driver = pg_app.driver
        assert isinstance(driver, PostgresDriver)
        interleave(monkeypatch, driver, before)
        refs = await task.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}], keys=["moving", "held", None])

        # Round two inserts the moving job alone and looks the held key up again.
        assert seen == ["insert_many", "lookup", "insert_one", "lookup"]
        assert [ref.duplicate for ref in refs] == [False, True, False]
        assert refs[1].id == held
        rows = other.execute(f"select id::text, state from {pg_app.schema}.jobs").fetchall()  # type: ignore[arg-type]
        assert dict(rows) == {moving[0]: "done", held: "ready", refs[0].id: "ready", refs[2].id: "ready"}
