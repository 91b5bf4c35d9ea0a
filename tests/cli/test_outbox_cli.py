"""``workhorse outbox migrate`` and ``workhorse relay`` in-process, on a source database of their
own beside the queue's schema: what they print, move and refuse."""

from __future__ import annotations

import asyncio
import json

import psycopg
from clikit import as_json, invoke, refused, refused_human

from workhorse import App, Outbox

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"


def stage(database_url: str, schema: str, source: str, count: int) -> list[str]:
    app = App(database_url, schema=schema)

    @app.job(name="cli.outbox.job", tenant="none")
    def job(ctx: object, payload: object) -> None:
        return None

    with psycopg.connect(source) as conn:
        refs = Outbox(app).stage_many_sync(conn, job, [{"n": i} for i in range(count)])
    asyncio.run(app.close())
    return [r.id for r in refs]


def test_migrate_then_relay_moves_every_staged_row(database_url: str, schema: str, dedicated_database: str) -> None:
    assert invoke(database_url, schema, "migrate").exit_code == 0
    first = invoke(database_url, schema, "outbox", "migrate", "--source", dedicated_database, "--json")
    assert first.exit_code == 0, first.output
    assert as_json(first)["schema"] == schema and as_json(first)["sources"][0]["applied"] == [1]
    again = invoke(database_url, schema, "outbox", "migrate", "--source", dedicated_database)
    assert again.exit_code == 0 and "up to date" in again.stdout
    ids = stage(database_url, schema, dedicated_database, 7)
    moved = invoke(database_url, schema, "relay", "--source", dedicated_database, "--burst", "--batch", "3", "--json")
    assert moved.exit_code == 0, moved.output
    stats = json.loads(moved.stdout)
    assert (stats["claimed"], stats["enqueued"], stats["batches"], stats["present"]) == (7, 7, 3, 0)
    assert stats["sources"][0]["enqueued"] == 7
    listed = as_json(invoke(database_url, schema, "ls", "--json", "--limit", "100"))
    assert sorted(job["id"] for job in listed["jobs"]) == sorted(ids)


def test_relay_refuses_a_source_with_no_staging_table(database_url: str, schema: str, dedicated_database: str) -> None:
    assert invoke(database_url, schema, "migrate").exit_code == 0
    error = refused(
        invoke(database_url, schema, "relay", "--source", dedicated_database, "--burst", "--json"),
        "OUTBOX_NOT_MIGRATED",
    )
    assert "workhorse outbox migrate --source" in error["fix"]
    refused_human(invoke(database_url, schema, "relay", "--source", dedicated_database), "OUTBOX_NOT_MIGRATED")


def test_an_unreachable_source_fails_at_start_with_its_reason(database_url: str, schema: str) -> None:
    result = invoke(database_url, schema, "relay", "--source", UNREACHABLE, "--json")
    assert result.exit_code == 1, result.output  # like a worker whose database is down: a supervisor restarts it
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "OUTBOX_SOURCE_UNAVAILABLE" and "127.0.0.1" in error["cause"]
    refused(invoke(database_url, schema, "outbox", "migrate", "--source", UNREACHABLE, "--json"),
            "OUTBOX_SOURCE_UNAVAILABLE")  # fmt: skip


def test_bad_options_are_refused_before_anything_runs(database_url: str, schema: str, dedicated_database: str) -> None:
    refused(invoke(database_url, schema, "relay", "--source", dedicated_database, "--lease", "soon", "--json"),
            "CONFIG_INVALID")  # fmt: skip
    result = invoke(database_url, schema, "relay", "--source", dedicated_database, "--batch", "0")
    assert result.exit_code == 2
    assert invoke(database_url, schema, "relay").exit_code == 2  # --source is required
