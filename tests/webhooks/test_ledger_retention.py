"""The retention purge of the webhooks delivery ledger (``Retention(webhook_deliveries=...)``): rows
older than the age by their attempt time (``created_at``) go, younger ones stay, in small batches
each its own statement; a dry run counts them and removes nothing; ``None`` keeps them all; the
memory driver, which has no webhooks, reports 0 in the same document; and the batch walks
``webhook_deliveries_created_idx`` (migration 017), oldest attempt first.

Rows are written straight into the ledger with their attempt time already in the past (test
setup, not a mock: the purge's own ``now()`` judges them)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest

import workhorse.retention.queries as sql
from workhorse import App, ConfigurationError, Retention
from workhorse._db.migrate import available

DAY = 86400.0
# Every other target kept: only the ledger is judged.
ONLY_LEDGER = {
    "done": None,
    "cancelled": None,
    "failed": None,
    "dead": None,
    "events": None,
    "workers": None,
    "flow_starts": None,
    "counters": None,
}

ENDPOINT = """
insert into {s}.webhook_endpoints (id, tenant, url, secret)
values (%(id)s, 'o1', 'http://127.0.0.1:9/hook', 'whsec_test')
"""

# `n` attempts of one endpoint, `days` ago.
ATTEMPTS = """
insert into {s}.webhook_deliveries (endpoint_id, job_id, message_id, event, attempt, status, created_at)
select %(endpoint)s, gen_random_uuid(), 'msg_' || g, 'order.paid', 1, 'delivered',
       now() - %(days)s::float8 * interval '1 day'
from generate_series(1, %(n)s) as g
"""


def report(dry_run: bool = False, webhook_deliveries: int = 0) -> dict[str, Any]:
    jobs = dict.fromkeys(("done", "cancelled", "failed", "dead"), 0)
    others = dict.fromkeys(("events", "workers", "flow_starts", "counters"), 0)
    removed = {"jobs": jobs, "steps": 0, **others, "webhook_deliveries": webhook_deliveries}
    return {"removed": removed, "dry_run": dry_run}


def ledger(app: App, url: str, *, old: int, recent: int, old_days: float = 40, recent_days: float = 1) -> str:
    """One endpoint with `old` attempts `old_days` ago and `recent` attempts `recent_days` ago."""
    endpoint = str(uuid.uuid4())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ENDPOINT.format(s=app.schema), {"id": endpoint})  # type: ignore[arg-type]
        for n, days in ((old, old_days), (recent, recent_days)):
            if n:
                conn.execute(ATTEMPTS.format(s=app.schema), {"endpoint": endpoint, "days": days, "n": n})  # type: ignore[arg-type]
    return endpoint


def ages(app: App, url: str) -> list[float]:
    """The ledger's rows' ages in days, oldest first."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f"select extract(epoch from now() - created_at)::float8 / 86400 from {app.schema}.webhook_deliveries "  # type: ignore[arg-type]
            "order by created_at"
        ).fetchall()
    return [round(r[0]) for r in rows]


async def test_old_attempts_go_and_recent_ones_stay(pg_app: App, database_url: str) -> None:
    endpoint = ledger(pg_app, database_url, old=3, recent=2)
    pg_app.retention = Retention(**ONLY_LEDGER, webhook_deliveries="30d")
    assert (await pg_app.admin.purge()).to_dict() == report(webhook_deliveries=3)
    assert ages(pg_app, database_url) == [1, 1]
    page = await pg_app.webhooks.deliveries(endpoint)
    assert len(page.deliveries) == 2
    assert (await pg_app.admin.purge()).to_dict() == report()  # nothing left that old


async def test_the_default_policy_keeps_the_ledger_30_days(pg_app: App, database_url: str) -> None:
    ledger(pg_app, database_url, old=2, recent=1, old_days=31, recent_days=29)
    assert pg_app.retention == Retention()
    assert (await pg_app.admin.purge()).removed["webhook_deliveries"] == 2
    assert ages(pg_app, database_url) == [29]


async def test_a_dry_run_counts_the_old_attempts_and_removes_nothing(pg_app: App, database_url: str) -> None:
    ledger(pg_app, database_url, old=4, recent=1)
    pg_app.retention = Retention(**ONLY_LEDGER, webhook_deliveries="30d")
    assert (await pg_app.admin.purge(dry_run=True)).to_dict() == report(dry_run=True, webhook_deliveries=4)
    assert ages(pg_app, database_url) == [40, 40, 40, 40, 1]
    assert (await pg_app.admin.purge()).to_dict() == report(webhook_deliveries=4)  # exactly what it counted


async def test_none_keeps_every_attempt(pg_app: App, database_url: str) -> None:
    ledger(pg_app, database_url, old=3, recent=1, old_days=10_000)
    pg_app.retention = Retention(**dict.fromkeys(ONLY_LEDGER, 0), webhook_deliveries=None)
    assert (await pg_app.admin.purge()).to_dict() == report()
    assert (await pg_app.admin.purge(dry_run=True)).to_dict() == report(dry_run=True)
    assert len(ages(pg_app, database_url)) == 4
    pg_app.retention = None
    assert (await pg_app.admin.purge()).to_dict() == report()
    assert len(ages(pg_app, database_url)) == 4


@pytest.mark.parametrize("rows", [7, 8])
async def test_small_batches_still_remove_every_old_attempt_in_one_call(
    pg_app: App, database_url: str, rows: int
) -> None:
    ledger(pg_app, database_url, old=rows, recent=1)
    pg_app.retention = Retention(**ONLY_LEDGER, webhook_deliveries="30d", batch=2)
    assert (await pg_app.admin.purge()).removed["webhook_deliveries"] == rows
    assert ages(pg_app, database_url) == [1]


async def test_an_endpoints_removal_still_cascades_past_the_purge(pg_app: App, database_url: str) -> None:
    """The purge deletes ledger rows only: the endpoint stays, and its later removal still takes
    what the purge left."""
    endpoint = ledger(pg_app, database_url, old=2, recent=2)
    pg_app.retention = Retention(**ONLY_LEDGER, webhook_deliveries="30d")
    await pg_app.admin.purge()
    assert (await pg_app.webhooks.endpoint(endpoint)).id == endpoint
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"delete from {pg_app.schema}.webhook_endpoints")  # type: ignore[arg-type]
    assert ages(pg_app, database_url) == []


async def test_the_ledger_is_the_last_target_of_the_document(pg_app: App, database_url: str) -> None:
    ledger(pg_app, database_url, old=1, recent=0)
    pg_app.retention = Retention(webhook_deliveries=0)
    assert (await pg_app.admin.purge(dry_run=True)).to_dict() == report(dry_run=True, webhook_deliveries=1)
    on_postgres = (await pg_app.admin.purge()).to_dict()
    assert on_postgres == report(webhook_deliveries=1)
    assert list(on_postgres["removed"])[-1] == "webhook_deliveries"
    assert type(on_postgres["removed"]["webhook_deliveries"]) is int


def test_refusals_name_the_target() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Retention(webhook_deliveries="a month")
    assert caught.value.code == "CONFIG_INVALID"
    assert "webhook_deliveries" in caught.value.cause and "'a month'" in caught.value.cause
    assert caught.value.fix


# -- the statements and the index -----------------------------------------------------------------


def test_the_batch_walks_the_attempt_time_index(pg_app: App, database_url: str) -> None:
    """At scale the batch is an index scan over webhook_deliveries_created_idx, oldest first, and
    its delete goes by primary key: no step of it scans the whole ledger."""
    endpoint = str(uuid.uuid4())
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(ENDPOINT.format(s=pg_app.schema), {"id": endpoint})  # type: ignore[arg-type]
        conn.execute(
            f"""insert into {pg_app.schema}.webhook_deliveries
                (endpoint_id, job_id, message_id, event, attempt, status, created_at)
            select %(e)s, gen_random_uuid(), 'msg_' || g, 'order.paid', 1, 'delivered',
                   now() - g * interval '1 minute'
            from generate_series(1, 50000) as g""",  # type: ignore[arg-type]
            {"e": endpoint},
        )
        conn.execute(f"analyze {pg_app.schema}.webhook_deliveries")  # type: ignore[arg-type]
        text = sql.PURGE_WEBHOOK_DELIVERIES.replace("{schema}", pg_app.schema)
        plan = conn.execute(f"explain {text}", {"age": 30 * DAY, "batch": 500}).fetchall()  # type: ignore[arg-type]
    shown = "\n".join(r[0] for r in plan)
    assert "webhook_deliveries_created_idx" in shown, shown
    assert "webhook_deliveries_pkey" in shown, shown
    assert "Seq Scan" not in shown, shown


@pytest.mark.parametrize("name", ["PURGE_WEBHOOK_DELIVERIES", "COUNT_WEBHOOK_DELIVERIES"])
def test_each_ledger_statement_prepares(name: str, database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    text = getattr(sql, name).replace("{schema}", schema)
    params: dict[str, int] = {}
    text = re.sub(r"%\((\w+)\)s", lambda m: f"${params.setdefault(m.group(1), len(params) + 1)}", text)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"prepare check_stmt as {text}")  # type: ignore[arg-type]
        conn.execute("deallocate check_stmt")


def test_migration_017_adds_the_index_and_runs_again_harmlessly(database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    [migration] = [m for m in available() if m.version == 17]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(migration.statement(schema))  # type: ignore[arg-type]
        indexes = conn.execute(
            "select indexname from pg_indexes where schemaname = %s and tablename = 'webhook_deliveries'", (schema,)
        ).fetchall()
    assert {name for (name,) in indexes} == {
        "webhook_deliveries_pkey",
        "webhook_deliveries_endpoint_idx",
        "webhook_deliveries_created_idx",
    }
