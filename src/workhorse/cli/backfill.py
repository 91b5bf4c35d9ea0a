"""``backfill ls`` (the deploy gate with ``--pending``) and ``backfill run`` (a dry run unless
``--write``, which starts the pass as a job; ``--wait`` follows it to its end)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from workhorse.app import App
from workhorse.backfill import BackfillStatus, DryRun, PassStarted, dry_run, read_pass, start, status
from workhorse.backfill.api import DRY_RUN_BATCHES, LIVE_STATES
from workhorse.backfill.errors import BackfillError, failed, pending, stalled
from workhorse.cli.main import FAILED, REFUSED, Refusal, State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, print_refusal, stderr, stdout, styled
from workhorse.errors import ConfigurationError

WAIT_POLL = 0.5  # seconds between two reads of a followed pass
STATUS_STYLES = {"running": "yellow", "completed": "green", "failed": "red", "stalled": "bold red"}


@click.group("backfill", short_help="Batched data migrations declared with @app.backfill.")
def backfill() -> None:
    """Backfills: data migrations declared in code with @app.backfill, run in batches as a job on
    the workers, each batch committed with its cursor; gated by WORKHORSE_ENV (development when
    unset) and `requires`; recorded in a ledger, one row per pass.

    \b
    Examples:
      workhorse --app myproject.jobs:app backfill ls
      workhorse --app myproject.jobs:app backfill ls --pending      # a deploy gate: exit 2 while any is pending
      workhorse --app myproject.jobs:app backfill run fill-slugs    # a dry run: nothing is written
      workhorse --app myproject.jobs:app backfill run fill-slugs --write --wait
    """


@backfill.command("ls")
@click.option(
    "--pending", "only_pending", is_flag=True, help="Only backfills with no completed pass here; exit 2 if any."
)
@json_option
@pass_state
def list_backfills(state: State, *, only_pending: bool, as_json: bool) -> None:
    """Every declared backfill with its newest pass: status, rows, batches, its job, and whether
    the declaration changed since that pass (its checksum differs).

    With --pending, only those declared for this environment (WORKHORSE_ENV) that have no completed
    pass in it, and exit 2 (BACKFILL_PENDING) while there is one: a step of a deploy pipeline.
    """
    app = state.app(required=True)
    found: list[BackfillStatus] = run_with_app(app, status)
    env = found[0].environment if found else ""
    shown = [s for s in found if s.pending] if only_pending else found
    error = pending([s.backfill.name for s in shown], env) if only_pending and shown else None
    if as_json:
        document: dict[str, Any] = {"backfills": [s.to_dict() for s in shown]}
        if error is not None:
            document["error"] = error.to_dict()
        emit_json(document)
    else:
        _print_statuses(shown, only_pending)
        if error is not None:
            print_refusal(error, as_json=False)
    if error is not None:
        click.get_current_context().exit(REFUSED)


def _print_statuses(found: list[BackfillStatus], only_pending: bool) -> None:
    console = stdout()
    if not found:
        console.print(styled("no backfill is pending" if only_pending else "no backfill is declared", "dim"))
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    # The name and the status are never cut; the job id and the notes fold at a narrow terminal.
    table.add_column("backfill", no_wrap=True, min_width=max(len(s.backfill.name) for s in found))
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("rows", justify="right", no_wrap=True)
    table.add_column("batches", justify="right", no_wrap=True)
    table.add_column("finished", no_wrap=True)
    table.add_column("job", overflow="fold")
    table.add_column("note", overflow="fold")
    for s in found:
        latest = s.latest
        notes = []
        if not s.applies_here:
            notes.append(f"not declared for {s.environment}")
        if s.changed:
            notes.append("declaration changed since this pass")
        if latest is not None and latest["status"] == "running" and latest["job_state"] not in LIVE_STATES:
            notes.append("its job ended unfinished: the next --write marks it failed")
        if latest is None:
            table.add_row(s.backfill.name, styled("never run", "dim"), "-", "-", "-", "-", "; ".join(notes))
            continue
        shown = latest["status"]
        progress = latest.get("progress") or {}
        if shown == "running" and isinstance(progress.get("total"), int):
            shown += f" {progress['fraction'] * 100:.0f}%"
        table.add_row(
            s.backfill.name,
            styled(shown, STATUS_STYLES.get(latest["status"], "")),
            "not reported" if latest["rows"] is None else f"{latest['rows']:,}",
            f"{latest['batches']:,}",
            ago(latest["finished_at"]),
            f"{latest['job_state'] or 'gone'} {latest['job_id'] or '-'}",
            "; ".join([f"pass {latest['id']}", *notes]),
        )
    console.print(table)


@backfill.command("run")
@click.argument("name")
@click.option("--write", is_flag=True, help="Apply it: start the pass as a job on the workers.")
@click.option("--wait", is_flag=True, help="With --write: follow the pass's progress until it ends.")
@click.option("--force", is_flag=True, help="With --write: run a completed backfill again (a new ledger row).")
@click.option(
    "--batches",
    type=int,
    default=DRY_RUN_BATCHES,
    show_default=True,
    help="A dry run tries at most this many batches.",
)
@json_option
@pass_state
def run_backfill(state: State, *, name: str, write: bool, wait: bool, force: bool, batches: int, as_json: bool) -> None:
    """Run backfill NAME. Without --write, a dry run: up to --batches batches in this process, each
    in a transaction that is rolled back; prints what they would change. Nothing is written, the
    ledger included.

    With --write, the pass starts as a job (`workhorse.backfill`) on the app's workers; each batch
    commits with its cursor, so a killed or drained pass resumes after its last committed batch.
    """
    if (wait or force) and not write:
        flag = "--wait" if wait else "--force"
        raise ConfigurationError(
            cause=f"{flag} applies to a pass that writes, and this is a dry run (no --write)",
            fix=f"workhorse backfill run {name} --write {flag}",
        )
    app = state.app(required=True)
    if not write:
        report: DryRun = run_with_app(app, lambda a: dry_run(a, name, batches=batches))
        if as_json:
            emit_json(report.to_dict())
        else:
            _print_dry_run(report)
        return
    started: PassStarted = run_with_app(app, lambda a: start(a, name, force=force))
    if not wait:
        if as_json:
            emit_json(started.to_dict())
        else:
            stdout().print(
                f"pass {started.pass_id} of {name} started as job {started.job_id} ({started.environment}); "
                f"follow it: workhorse backfill ls, workhorse show {started.job_id}"
            )
        return
    if not as_json:
        stdout().print(
            f"pass {started.pass_id} of {name} queued as job {started.job_id}; following it (a worker runs it; "
            "Ctrl-C stops following, not the pass)"
        )
    try:
        final = run_with_app(app, lambda a: _follow(a, started, quiet=as_json))
    except KeyboardInterrupt:
        stderr().print(f"stopped following; pass {started.pass_id} goes on: workhorse backfill ls")
        click.get_current_context().exit(130)
    error = _ended_badly(final)
    if error is not None:
        raise Refusal(error, FAILED)
    if as_json:
        emit_json(final)
    else:
        stdout().print(
            f"pass {final['id']} of {name} completed: {_rows(final['rows'], ' rows')} in {final['batches']:,} batches"
        )


async def _follow(app: App, started: PassStarted, *, quiet: bool) -> dict[str, Any]:
    """Read the pass every WAIT_POLL seconds until it is no longer running (or its job ended)."""
    console = stdout()
    shown: tuple[int, int] | None = None
    last_line = 0.0
    while True:
        row = await read_pass(app, started.pass_id)
        assert row is not None
        if row["status"] != "running" or row["job_state"] not in LIVE_STATES:
            return row
        seen = (row["batches"], row["rows"])
        if not quiet and seen != shown and time.monotonic() - last_line >= 1.0:
            progress = row.get("progress") or {}
            total = progress.get("total")
            of = f" of {total:,}" if isinstance(total, int) else ""
            done = "rows: not reported" if row["rows"] is None else f"{row['rows']:,}{of} rows"
            console.print(f"{done}, {row['batches']:,} batches ({row['job_state']})")
            shown, last_line = seen, time.monotonic()
        await asyncio.sleep(WAIT_POLL)


def _ended_badly(row: dict[str, Any]) -> BackfillError | None:
    if row["status"] == "completed":
        return None
    if row["status"] == "stalled":
        return stalled(row["backfill"], int(row["remaining"] or 0), None if row["rows"] is None else int(row["rows"]))
    if row["status"] == "running":  # its job ended without finishing it (cancelled, removed)
        return failed(row["backfill"], int(row["id"]), f"unfinished, its job {row['job_state'] or 'removed'}", None)
    return failed(row["backfill"], int(row["id"]), row["status"], row["error"])


def _print_dry_run(report: DryRun) -> None:
    console = stdout()
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("batch", justify="right", no_wrap=True)
    table.add_column("rows", justify="right", no_wrap=True)
    table.add_column("next cursor", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    for b in report.batches:
        rows = "not reported" if b["rows"] is None else f"{b['rows']:,}"
        table.add_row(str(b["batch"]), rows, str(b["cursor"]), f"{b['seconds'] * 1000:.0f}ms")
    console.print(table)
    console.print(
        f"{_rows(report.rows, ' rows')} in {len(report.batches):,} batches"
        + (", the sweep's end" if report.finished else "")
    )
    if report.remaining is not None:
        console.print(f"count answers {report.remaining:,} rows to change")
    if report.stopped:
        console.print(styled(f"stopped: {report.stopped}", "dim"))
    console.print(Text(f"dry run in {report.environment}: nothing was written", style="dim"))


def _rows(rows: int | None, unit: str = "") -> str:
    """A row count in a sentence, as the ledger keeps it: None is "not reported" (never a false 0)."""
    return "rows: not reported" if rows is None else f"{rows:,}{unit}"


COMMANDS = (backfill,)
