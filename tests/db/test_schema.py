"""Migrations and the named statements, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest

import workhorse.deps.queries as dep_sql
import workhorse.health.queries as health_sql
import workhorse.leader.queries as rescue_sql
import workhorse.leader.queries as scheduler_sql
import workhorse.limits.queries as flow_sql
import workhorse.retention.queries as retention_sql
import workhorse.steps.queries as step_sql
from workhorse import App, JobContext, SchemaError
from workhorse._db import migrate
from workhorse._db.queries import jobs as job_sql
from workhorse._db.queries import migrations as migration_sql


async def test_concurrent_migrations_apply_each_file_once(database_url: str, schema: str) -> None:
    apps = [App(database_url, schema=schema) for _ in range(6)]
    results = await asyncio.gather(*(a.migrate() for a in apps))
    assert sorted(v for r in results for v in r) == [m.version for m in migrate.available()]
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f"select version from {schema}.migrations").fetchall()  # type: ignore[arg-type]
    assert [r[0] for r in rows] == [m.version for m in migrate.available()]
    assert await apps[0].migrate() == []
    for a in apps:
        await a.close()


async def test_a_worker_refuses_an_unmigrated_schema(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)

    @app.job(tenant="none")
    async def job(ctx: JobContext, payload: None) -> None:
        return None

    with pytest.raises(SchemaError) as refused:
        await app.worker().run(burst=True)
    assert refused.value.code == "SCHEMA_NOT_MIGRATED"
    assert "workhorse migrate" in refused.value.fix
    with pytest.raises(SchemaError):
        await job.enqueue(None)  # an enqueue against missing tables is translated too
    await app.close()


async def test_a_worker_refuses_a_schema_newer_than_its_code(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"insert into {pg_app.schema}.migrations (version, name) values (999, 'future')")  # type: ignore[arg-type]

    @pg_app.job(tenant="none")
    async def job(ctx: JobContext, payload: None) -> None:
        return None

    with pytest.raises(SchemaError) as refused:
        await pg_app.worker().run(burst=True)
    assert refused.value.code == "SCHEMA_TOO_NEW"
    with pytest.raises(SchemaError) as migrating:
        await pg_app.migrate()
    assert migrating.value.code == "SCHEMA_TOO_NEW"


def _statements() -> list[tuple[str, str]]:
    found = []
    for module in (
        job_sql,
        flow_sql,
        migration_sql,
        rescue_sql,
        scheduler_sql,
        step_sql,
        dep_sql,
        retention_sql,
        health_sql,
    ):
        for name, value in vars(module).items():
            if (
                name.isupper()
                and isinstance(value, str)
                and re.search(r"\b(select|update|insert|delete|create)\b", value)
            ):
                found.append((f"{module.__name__.rsplit('.', 1)[-1]}.{name}", value))
    return found


@pytest.mark.parametrize(("name", "statement"), _statements(), ids=[n for n, _ in _statements()])
def test_every_named_statement_prepares_against_the_migrated_schema(
    name: str, statement: str, database_url: str, schema: str
) -> None:
    """Each constant is parsed, planned and type-checked by the server (PREPARE, never executed)."""
    App(database_url, schema=schema).migrate_sync()
    text = statement.replace("{schema}", schema).replace("{version}", "0").replace("{name}", "check")
    params: dict[str, int] = {}
    text = re.sub(r"%\((\w+)\)s", lambda m: f"${params.setdefault(m.group(1), len(params) + 1)}", text)
    positional = iter(range(1, 100))
    text = re.sub(r"%s", lambda m: f"${next(positional)}", text)
    with psycopg.connect(database_url, autocommit=True) as conn:
        if text.lstrip().startswith("create") or text.rstrip().endswith(";"):
            # DDL cannot be prepared, nor can a literal script line: run it and roll it back
            with conn.transaction(force_rollback=True):
                conn.execute(text)  # type: ignore[arg-type]
            return
        conn.execute(f"prepare check_stmt as {text}")  # type: ignore[arg-type]
        conn.execute("deallocate check_stmt")


def test_migration_script_for_a_dba_is_complete() -> None:
    text = migrate.script("workhorse")
    assert "create table if not exists workhorse.jobs" in text
    assert "insert into workhorse.migrations" in text
    assert "{schema}" not in text


def test_the_claim_reads_the_partial_index(pg_app: App, database_url: str) -> None:
    """At scale the due-job scan is an index scan over the partial index, not a table scan."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"""insert into {pg_app.schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, finished_at)
            select gen_random_uuid(), 'task', 'default', 'done', '{{}}', 1, now(), now()
            from generate_series(1, 50000)"""  # type: ignore[arg-type]
        )
        conn.execute(f"analyze {pg_app.schema}.jobs")  # type: ignore[arg-type]
        plan = conn.execute(
            f"""explain select id from {pg_app.schema}.jobs
            where state in ('ready', 'delayed') and run_at <= now() and queue = any(array['default'])
            order by priority desc, run_at, id limit 10"""  # type: ignore[arg-type]
        ).fetchall()
    text = "\n".join(r[0] for r in plan)
    assert "jobs_due_idx" in text, text


def test_the_dba_script_runs_twice(database_url: str, schema: str) -> None:
    """Every file is written to run again harmlessly: a DBA who applies the script twice gets the
    same schema, and the code accepts it."""
    text = migrate.script(schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(text)  # type: ignore[arg-type]
        conn.execute(text)  # type: ignore[arg-type]
    App(database_url, schema=schema).migrate_sync()  # nothing pending, nothing refused


async def test_migration_007_keeps_the_rows_and_the_rules(database_url: str, schema: str) -> None:
    """A database migrated before 007, with rows in it: 007 turns the CHECKs into domains, keeps
    every row, and the domains refuse what the CHECKs refused."""
    before = [m for m in migrate.available() if m.version < 7]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(migration_sql.CREATE_SCHEMA.replace("{schema}", schema))  # type: ignore[arg-type]
        conn.execute(migration_sql.CREATE_LEDGER.replace("{schema}", schema))  # type: ignore[arg-type]
        for m in before:
            conn.execute(m.statement(schema))
            conn.execute(
                migration_sql.RECORD.replace("{schema}", schema),  # type: ignore[arg-type]
                {"version": m.version, "name": m.name},
            )
        conn.execute(
            f"insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, attempt, claims, run_at) "  # type: ignore[arg-type]
            "values ('01900000-0000-7000-8000-000000000001', 'n', 'q', 'done', '{}', 3, 2, 2, now()), "
            "('01900000-0000-7000-8000-000000000002', 'n', 'q', 'ready', '{\"a\": 1}', 5, 0, 0, now())"
        )
        conn.execute(
            f"insert into {schema}.steps (job_id, name, seq, state, attempt) "  # type: ignore[arg-type]
            "values ('01900000-0000-7000-8000-000000000001', 's', 1, 'done', 1)"
        )
        conn.execute(
            f"insert into {schema}.counters (tier, bucket, queue, name, completed) "  # type: ignore[arg-type]
            "values ('minute', now(), 'q', 'n', 4)"
        )
    assert {7, 8} <= set(await App(database_url, schema=schema).migrate())
    with psycopg.connect(database_url, autocommit=True) as conn:
        indexes = conn.execute(
            "select indexname from pg_indexes where schemaname = %s and tablename = 'jobs'", (schema,)
        ).fetchall()
        # 008: the list walks the primary key; no index on created_at is written on every insert.
        # 010: the purge's finished rows; 011: the stats' dead and failed counts, index-only.
        # 020: the jobs that ever failed, for an error search.
        assert {name for (name,) in indexes} == {
            "jobs_errored_idx",
            "jobs_pkey",
            "jobs_due_idx",
            "jobs_later_idx",
            "jobs_running_lease_idx",
            "jobs_live_key_idx",
            "jobs_finished_idx",
            "jobs_failures_idx",
        }
        rows = conn.execute(
            f"select state, attempt, claims, max_attempts, payload from {schema}.jobs order by id"  # type: ignore[arg-type]
        ).fetchall()
        assert rows == [("done", 2, 2, 3, {}), ("ready", 0, 0, 5, {"a": 1})]
        assert conn.execute(f"select state from {schema}.steps").fetchall() == [("done",)]  # type: ignore[arg-type]
        assert conn.execute(f"select tier, completed from {schema}.counters").fetchall() == [("minute", 4)]  # type: ignore[arg-type]
        refused = [
            f"update {schema}.jobs set state = 'bogus'",
            f"update {schema}.jobs set attempt = -1",
            f"update {schema}.jobs set claims = -1",
            f"update {schema}.jobs set max_attempts = 0",
            f"update {schema}.steps set state = 'bogus'",
            f"update {schema}.counters set tier = 'week'",
        ]
        for statement in refused:
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(statement)  # type: ignore[arg-type]
