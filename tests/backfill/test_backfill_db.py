"""Backfills on PostgreSQL through the library: a pass from start to end, its ledger statuses, the
gates and their refusals, the dry run writing nothing, the batch and its checkpoint committing or
rolling back together, and two runners of one pass applying each batch once."""

from __future__ import annotations

import asyncio
from types import ModuleType

import psycopg
import pytest
from bfkit import ROWS, context, items, passes, table
from click.testing import CliRunner

from workhorse import App
from workhorse import backfill as bf
from workhorse.backfill import BackfillError
from workhorse.backfill.passes import run_pass
from workhorse.cli import cli


def _error(info: pytest.ExceptionInfo[BackfillError], code: str) -> BackfillError:
    error = info.value
    assert error.code == code
    assert error.cause and error.fix
    return error


async def _work(bfapp: ModuleType) -> None:
    await bfapp.app.worker(concurrency=2).run(burst=True)


async def test_a_pass_applies_every_row_once_and_completes(bfapp: ModuleType, database_url: str, schema: str) -> None:
    started = await bf.start(bfapp.app, "fill-slugs")
    assert started.pass_id > 0 and started.environment == "development"
    [row] = passes(database_url, schema)
    assert row["status"] == "running" and row["job_id"] == started.job_id and row["checksum"] == started.checksum
    await _work(bfapp)
    [row] = passes(database_url, schema)
    assert row["status"] == "completed" and row["rows"] == ROWS and row["batches"] == ROWS // 10 + 1
    assert row["cursor"] == ROWS and row["remaining"] == 0 and row["finished_at"] is not None
    assert all(slug == f"item-{i}" and hits == 1 for i, slug, hits in items(database_url, schema))
    job = await bfapp.app.get_job(started.job_id)
    assert job is not None and job.state == "done"
    assert job.progress is not None and job.progress["done"] == ROWS and job.progress["total"] == ROWS
    [status] = [s for s in await bf.status(bfapp.app) if s.backfill.name == "fill-slugs"]
    assert status.completed and not status.pending and not status.changed


async def test_a_completed_pass_refuses_a_rerun_and_force_writes_a_new_row(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    await bf.start(bfapp.app, "fill-slugs")
    await _work(bfapp)
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "fill-slugs")
    assert "--force" in _error(info, "BACKFILL_APPLIED").fix
    assert len(passes(database_url, schema)) == 1
    forced = await bf.start(bfapp.app, "fill-slugs", force=True)
    await _work(bfapp)
    first, second = passes(database_url, schema)
    assert first["status"] == "completed" and first["rows"] == ROWS and not first["forced"]
    assert second["id"] == forced.pass_id and second["forced"] and second["status"] == "completed"
    assert all(hits == 2 for _, _, hits in items(database_url, schema))  # a forced re-run runs again


async def test_a_live_pass_refuses_a_second(bfapp: ModuleType, database_url: str, schema: str) -> None:
    started = await bf.start(bfapp.app, "fill-slugs")
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "fill-slugs", force=True)
    error = _error(info, "BACKFILL_RUNNING")
    assert started.job_id in error.cause and error.fix == f"workhorse show {started.job_id}"
    assert len(passes(database_url, schema)) == 1


async def test_a_running_row_whose_job_ended_is_failed_by_the_next_start(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    started = await bf.start(bfapp.app, "fill-slugs")
    await bfapp.app.cancel(started.job_id)
    again = await bf.start(bfapp.app, "fill-slugs")
    first, second = passes(database_url, schema)
    assert first["status"] == "failed" and "cancelled" in first["error"]
    assert second["id"] == again.pass_id and second["status"] == "running"


async def test_the_gates_refuse_with_code_cause_and_fix(
    bfapp: ModuleType, database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "fill-slug")
    assert "declared: breaks, fill-slugs" in _error(info, "BACKFILL_UNKNOWN").cause
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "production-only")
    error = _error(info, "BACKFILL_ENVIRONMENT")
    assert "'development'" in error.cause and error.fix.startswith("WORKHORSE_ENV=production ")
    monkeypatch.setenv("WORKHORSE_ENV", "production")
    await bf.start(bfapp.app, "production-only")  # the same declaration, in its environment
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "needs-ours")
    assert _error(info, "BACKFILL_MIGRATION_PENDING").fix == "workhorse migrate"
    with pytest.raises(BackfillError) as info:
        await bf.dry_run(bfapp.app, "needs-app")  # the app's ledger table does not exist yet
    assert "app_migrations(version=42)" in _error(info, "BACKFILL_MIGRATION_PENDING").cause
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create table {schema}.app_migrations (version text)")  # type: ignore[arg-type]
        conn.execute(f"insert into {schema}.app_migrations values ('41')")  # type: ignore[arg-type]
    with pytest.raises(BackfillError) as info:
        await bf.start(bfapp.app, "needs-app")
    _error(info, "BACKFILL_MIGRATION_PENDING")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"insert into {schema}.app_migrations values ('42')")  # type: ignore[arg-type]
    await bf.start(bfapp.app, "needs-app")
    assert [p["name"] for p in passes(database_url, schema)] == ["production-only", "needs-app"]


async def test_the_dry_run_writes_nothing(bfapp: ModuleType, database_url: str, schema: str) -> None:
    before = [table(database_url, schema, t) for t in ("items", "backfill_passes", "jobs")]
    report = await bf.dry_run(bfapp.app, "fill-slugs", batches=3)
    assert [b["rows"] for b in report.batches] == [10, 10, 10] and report.rows == 30
    assert [b["cursor"] for b in report.batches] == [10, 20, 30]
    assert not report.finished and report.stopped is not None and report.remaining == ROWS
    whole = await bf.dry_run(bfapp.app, "fill-slugs", batches=50)
    assert whole.finished and whole.rows == ROWS and len(whole.batches) == ROWS // 10 + 1
    assert [table(database_url, schema, t) for t in ("items", "backfill_passes", "jobs")] == before


async def test_a_batch_and_its_checkpoint_roll_back_together(bfapp: ModuleType, database_url: str, schema: str) -> None:
    """``breaks`` updates rows, then raises: neither its update nor a checkpoint is left. On the last
    attempt the pass ends failed with the error."""
    started = await bf.start(bfapp.app, "breaks")
    with pytest.raises(RuntimeError):
        await run_pass(bfapp.app, context(started.job_id), {"backfill": "breaks", "pass": started.pass_id})
    [row] = passes(database_url, schema)
    assert row["status"] == "running" and row["batches"] == 0 and row["cursor"] is None
    assert all(slug is None for _, slug, _ in items(database_url, schema))
    final = context(started.job_id, attempt=5, max_attempts=5)
    with pytest.raises(RuntimeError):
        await run_pass(bfapp.app, final, {"backfill": "breaks", "pass": started.pass_id})
    [row] = passes(database_url, schema)
    assert row["status"] == "failed" and "the batch broke" in row["error"] and row["finished_at"] is not None
    assert all(slug is None for _, slug, _ in items(database_url, schema))


async def test_the_sweep_ending_while_count_answers_rows_stalls(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    started = await bf.start(bfapp.app, "sweeps-nothing")
    await _work(bfapp)
    [row] = passes(database_url, schema)
    assert row["status"] == "stalled" and row["remaining"] == ROWS and "BACKFILL_STALLED" in row["error"]
    job = await bfapp.app.get_job(started.job_id)
    assert job is not None and job.state == "dead"
    assert job.last_error is not None and f"still answers {ROWS} rows" in str(job.last_error)


async def test_two_runners_of_one_pass_apply_each_batch_once(
    bfapp: ModuleType, database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker frozen past its lease and the one that claimed the job after it both run the pass:
    they queue on the ledger row's lock and each continues from the cursor the other committed."""
    monkeypatch.setenv("BF_SLEEP", "0.01")  # each batch holds its lock a while: the two interleave
    started = await bf.start(bfapp.app, "fill-slugs")
    payload = {"backfill": "fill-slugs", "pass": started.pass_id}
    await asyncio.gather(
        run_pass(bfapp.app, context(started.job_id), payload), run_pass(bfapp.app, context(started.job_id), payload)
    )
    [row] = passes(database_url, schema)
    assert row["status"] == "completed" and row["rows"] == ROWS and row["batches"] == ROWS // 10 + 1
    assert [hits for _, _, hits in items(database_url, schema)] == [1] * ROWS


async def test_a_changed_declaration_is_reported(bfapp: ModuleType, database_url: str, schema: str) -> None:
    started = await bf.start(bfapp.app, "fill-slugs")
    declared = bf.registry(bfapp.app)["fill-slugs"]
    changed = bf.Backfill(
        declared.fn, name="fill-slugs", tenant="none", batch_size=25, environments=None, requires=None,
        count=declared.count, pause=None, rows_per_second=None,
    )  # fmt: skip
    bf.registry(bfapp.app)["fill-slugs"] = changed
    [status] = [s for s in await bf.status(bfapp.app) if s.backfill.name == "fill-slugs"]
    assert status.changed and status.to_dict()["latest"]["checksum"] == started.checksum
    await run_pass(bfapp.app, context(started.job_id), {"backfill": "fill-slugs", "pass": started.pass_id})
    [row] = passes(database_url, schema)
    assert row["checksum"] == started.checksum and row["ran_as"] == changed.checksum != started.checksum
    assert row["status"] == "completed" and row["batches"] == ROWS // 25 + 1


async def test_the_deploy_gate(bfapp: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackfillError) as info:
        await bf.check_pending(bfapp.app)
    error = _error(info, "BACKFILL_PENDING")
    assert "fill-slugs" in error.cause and "production-only" not in error.cause  # not declared for development
    monkeypatch.setenv("WORKHORSE_ENV", "production")
    with pytest.raises(BackfillError) as info:
        await bf.check_pending(bfapp.app)
    assert "production-only" in _error(info, "BACKFILL_PENDING").cause


async def test_the_memory_driver_refuses_backfills() -> None:
    app = App(driver="memory")

    @app.backfill("noop", tenant="none")
    async def noop(conn: object, cursor: object, limit: int) -> None:
        return None

    for call in (bf.start(app, "noop"), bf.dry_run(app, "noop"), bf.status(app)):
        with pytest.raises(BackfillError) as info:
            await call
        assert "memory driver" in _error(info, "POSTGRES_ONLY").cause


def test_every_ledger_statement_prepares(bfapp: ModuleType, database_url: str, schema: str) -> None:
    """Each constant of backfill/queries.py is parsed, planned and type-checked by the server."""
    import re

    import workhorse.backfill.queries as sql

    names = [n for n, v in vars(sql).items() if n.isupper() and isinstance(v, str) and "{table}" not in v]
    names.remove("LEDGER_COLUMNS")
    names.remove("IDLE_IN_BATCH")  # a SET (not preparable): test_a_batch_left_idle_... reads it back
    assert len(names) == 15

    def numbered(text: str) -> str:
        params: dict[str, int] = {}
        return re.sub(r"%\((\w+)\)s", lambda m: f"${params.setdefault(m.group(1), len(params) + 1)}", text)

    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in names:
            text = numbered(getattr(sql, name).replace("{schema}", schema))
            conn.execute(f"prepare check_stmt as {text}")  # type: ignore[arg-type]
            conn.execute("deallocate check_stmt")


async def test_a_cursor_that_is_not_json_fails_the_pass_at_once(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    @bfapp.app.backfill("bad-cursor", tenant="none")
    async def bad_cursor(conn: object, cursor: object, limit: int) -> object:
        await conn.execute(f"update {schema}.items set slug = 'x'")  # type: ignore[attr-defined]
        return object()

    started = await bf.start(bfapp.app, "bad-cursor")
    await _work(bfapp)
    [row] = passes(database_url, schema)
    assert row["status"] == "failed" and "BACKFILL_CURSOR_INVALID" in row["error"] and row["batches"] == 0
    assert all(slug is None for _, slug, _ in items(database_url, schema))
    job = await bfapp.app.get_job(started.job_id)
    assert job is not None and job.state == "dead" and job.attempt == 1


async def test_a_dry_run_batch_that_raises_is_a_refusal(bfapp: ModuleType, database_url: str, schema: str) -> None:
    with pytest.raises(BackfillError) as info:
        await bf.dry_run(bfapp.app, "breaks")
    assert "RuntimeError: the batch broke" in _error(info, "BACKFILL_BATCH_FAILED").cause
    assert all(slug is None for _, slug, _ in items(database_url, schema))


async def test_rows_per_second_paces_the_pass(bfapp: ModuleType, database_url: str, schema: str) -> None:
    @bfapp.app.backfill("paced", tenant="none", batch_size=10, rows_per_second=100)
    async def paced(conn: object, cursor: object, limit: int) -> object:
        n = int(cursor or 0) + 10
        return bf.Batch(n if n <= 40 else None, rows=10)

    started = await bf.start(bfapp.app, "paced")
    began = asyncio.get_running_loop().time()
    await run_pass(bfapp.app, context(started.job_id), {"backfill": "paced", "pass": started.pass_id})
    took = asyncio.get_running_loop().time() - began
    [row] = passes(database_url, schema)
    assert row["status"] == "completed" and row["rows"] == 50 and row["batches"] == 5
    assert took >= 0.35  # four waits of ~0.1 s (10 rows at 100 rows/s) between five batches


async def test_a_pass_resumes_though_its_gates_refuse_after_it_started(
    bfapp: ModuleType, database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy between two attempts (a new Alembic head, a worker of another WORKHORSE_ENV) does
    not fail a pass the gates admitted at its start."""
    monkeypatch.setenv("WORKHORSE_ENV", "production")
    started = await bf.start(bfapp.app, "production-only")
    monkeypatch.setenv("WORKHORSE_ENV", "staging")
    await run_pass(bfapp.app, context(started.job_id), {"backfill": "production-only", "pass": started.pass_id})
    [row] = passes(database_url, schema)
    assert row["status"] == "completed"


async def test_a_batch_left_idle_in_its_transaction_is_ended_by_the_server(bfapp: ModuleType) -> None:
    """The lock a frozen runner holds inside a batch is released by the server, not held forever."""
    from workhorse.backfill.postgres import open_ledger

    show = "show idle_in_transaction_session_timeout"
    async with open_ledger(bfapp.app.database_url, bfapp.app.schema) as ledger:
        async with ledger.transaction():
            cur = await ledger.conn.execute(show)
            assert await cur.fetchone() == ("1min",)
        # a SET LOCAL: the session (a pooled connection's next client) keeps the server's default
        cur = await ledger.conn.execute(show)
        assert await cur.fetchone() != ("1min",)


def _bare(bfapp: ModuleType, schema: str, *, counts: bool) -> None:
    """``bare-cursor``: the pinned form, a bare cursor, 30 rows a batch; with ``counts`` false the
    batch turns the server's counting off for its transaction (track_counts, as a server may run)."""

    @bfapp.app.backfill("bare-cursor", tenant="none", batch_size=30)
    async def bare_cursor(conn: psycopg.AsyncConnection[object], cursor: int | None, limit: int) -> int | None:
        if not counts:
            await conn.execute("set local track_counts = off")
        cur = await conn.execute(
            f"with b as (select id from {schema}.items where id > %s order by id limit %s) "  # type: ignore[arg-type]
            f"update {schema}.items as i set slug = 'bare-' || i.id from b where i.id = b.id returning i.id",
            (cursor or 0, limit),
        )
        ids = [row[0] for row in await cur.fetchall()]  # type: ignore[index]
        return max(ids) if ids else None


async def test_a_bare_cursor_pass_counts_the_rows_it_wrote(bfapp: ModuleType, database_url: str, schema: str) -> None:
    """Issue 29: the pinned form (a bare cursor) no longer records `rows 0` for a pass that updated
    every row: the pass counts what the function wrote in the batch's transaction."""
    _bare(bfapp, schema, counts=True)
    dry = await bf.dry_run(bfapp.app, "bare-cursor", batches=2)
    assert [b["rows"] for b in dry.batches] == [30, 30] and dry.rows == 60
    started = await bf.start(bfapp.app, "bare-cursor")
    await _work(bfapp)
    [row] = [p for p in passes(database_url, schema) if p["name"] == "bare-cursor"]
    assert row["status"] == "completed" and row["rows"] == ROWS and row["batches"] == 5
    job = await bfapp.app.get_job(started.job_id)
    assert job is not None and job.progress is not None
    assert job.progress["message"] == f"{ROWS:,} rows in 5 batches (no count declared: total unknown)"
    [status] = [s for s in await bf.status(bfapp.app) if s.backfill.name == "bare-cursor"]
    assert status.to_dict()["latest"]["rows"] == ROWS
    await bfapp.app.close()
    shown = await asyncio.to_thread(_cli, "ls")  # the command line runs its own event loop
    assert any("bare-cursor" in line and f" {ROWS} " in f" {line} " for line in shown.splitlines()), shown


async def test_rows_no_one_counted_are_not_reported_never_zero(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    _bare(bfapp, schema, counts=False)
    dry = await bf.dry_run(bfapp.app, "bare-cursor", batches=1)
    assert dry.batches[0]["rows"] is None and dry.rows is None
    started = await bf.start(bfapp.app, "bare-cursor")
    await _work(bfapp)
    [row] = [p for p in passes(database_url, schema) if p["name"] == "bare-cursor"]
    assert row["status"] == "completed" and row["rows"] is None and row["batches"] == 5
    job = await bfapp.app.get_job(started.job_id)
    assert job is not None and job.progress is not None
    assert job.progress["message"] == "5 batches (rows: not reported)"
    [status] = [s for s in await bf.status(bfapp.app) if s.backfill.name == "bare-cursor"]
    assert status.to_dict()["latest"]["rows"] is None
    await bfapp.app.close()
    shown = await asyncio.to_thread(_cli, "ls")  # the command line runs its own event loop
    assert any("bare-cursor" in line and "not reported" in line for line in shown.splitlines()), shown
    assert "rows: not reported in 1 batches" in await asyncio.to_thread(_cli, "run", "bare-cursor", "--batches", "1")


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--app", "bfapp:app", "backfill", *args], env={"COLUMNS": "200"}, color=False)
    assert result.exit_code == 0, result.output
    return result.stdout
