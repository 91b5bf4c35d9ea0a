"""``workhorse purge``: the webhooks delivery ledger is one of its targets, in the JSON document
and in the person's table, counted by --dry-run and removed by the real run (default policy: the
ledger's attempts older than 30 days)."""

from __future__ import annotations

import uuid

import psycopg
from clikit import as_json, invoke

from workhorse import App


def old_and_recent_attempts(database_url: str, schema: str) -> None:
    """One endpoint, an attempt 40 days ago and one a day ago."""
    App(database_url, schema=schema).migrate_sync()
    endpoint = str(uuid.uuid4())
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"insert into {schema}.webhook_endpoints (id, tenant, url, secret) "  # type: ignore[arg-type]
            "values (%s, 'o1', 'http://127.0.0.1:9/hook', 'whsec_test')",
            (endpoint,),
        )
        conn.execute(
            f"insert into {schema}.webhook_deliveries "  # type: ignore[arg-type]
            "(endpoint_id, job_id, message_id, event, attempt, status, created_at) "
            "select %s, gen_random_uuid(), 'msg_' || d, 'order.paid', 1, 'delivered', now() - d * interval '1 day' "
            "from unnest(array[40, 1]) as d",
            (endpoint,),
        )


def ledger_rows(database_url: str, schema: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(f"select count(*) from {schema}.webhook_deliveries").fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])


def test_purge_counts_and_removes_old_webhook_deliveries(database_url: str, schema: str) -> None:
    old_and_recent_attempts(database_url, schema)
    dry = invoke(database_url, schema, "purge", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    document = as_json(dry)
    assert document["dry_run"] is True
    assert list(document["removed"])[-1] == "webhook_deliveries"
    assert document["removed"]["webhook_deliveries"] == 1
    assert ledger_rows(database_url, schema) == 2
    shown = invoke(database_url, schema, "purge", "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert [line.split() for line in shown.stdout.splitlines() if "webhook" in line] == [["webhook", "deliveries", "1"]]
    real = invoke(database_url, schema, "purge", "--json")
    assert real.exit_code == 0, real.output
    assert as_json(real)["removed"]["webhook_deliveries"] == 1
    assert ledger_rows(database_url, schema) == 1
    again = invoke(database_url, schema, "purge")
    assert [line.split() for line in again.stdout.splitlines() if "webhook" in line] == [["webhook", "deliveries", "0"]]
