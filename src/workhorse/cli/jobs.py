"""Inspecting jobs (``ls``, ``show``) and the operator verbs: ``cancel``, ``requeue``, ``promote``, ``rm``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workhorse.admin import DEFAULT_PAGE, MAX_PAGE
from workhorse.app import App
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, span, state_text, stdout, trim
from workhorse.drivers.base import ALL_STATES, LIVE_STATES, Job, Page
from workhorse.errors import JobNotFoundError

ERROR_WIDTH = 48


@click.command("ls")
@click.option("--state", "state_filter", metavar="STATE", help=f"Only jobs in this state: {', '.join(ALL_STATES)}.")
@click.option("--queue", metavar="QUEUE", help="Only jobs on this queue.")
@click.option("--name", metavar="NAME", help="Only jobs of this name (module.function unless named).")
@click.option("--tenant", metavar="TENANT", help="Only this tenant's jobs.")
@click.option(
    "--limit",
    type=int,
    default=DEFAULT_PAGE,
    show_default=True,
    metavar="N",
    help=f"Jobs per page, 1 to {MAX_PAGE}.",
)
@click.option("--after", metavar="CURSOR", help="Start after this cursor: the `next` of the previous page.")
@json_option
@pass_state
def list_jobs(
    state: State,
    *,
    state_filter: str | None,
    queue: str | None,
    name: str | None,
    tenant: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first, one page at a time.

    \b
    Examples:
      workhorse ls --state dead
      workhorse ls --queue emails --limit 20 --json
      workhorse ls --after 0190f1c2-...        # the next page
    """
    filters = {"state": state_filter, "queue": queue, "name": name, "tenant": tenant}
    page: Page = run_with_app(state.app(), lambda app: app.list_jobs(**filters, limit=limit, after=after))
    if as_json:
        emit_json({"jobs": [job.to_dict(with_steps=False) for job in page.jobs], "next": page.next})
        return
    console = stdout()
    if not page.jobs:
        filtered = after is not None or any(value is not None for value in filters.values())
        console.print("no jobs match" if filtered else "no jobs yet")
        return
    console.print(jobs_table(page.jobs))
    if page.next is not None:
        words = ["workhorse"]
        for option, value in (("--app", state.app_spec), ("--schema", state.schema)):
            if value is not None:
                words += [option, value]
        words.append("ls")
        for option, value in filters.items():
            if value is not None:
                words += [f"--{option}", value]
        if limit != DEFAULT_PAGE:
            words += ["--limit", str(limit)]
        words += ["--after", page.next]
        console.print(Text(f"next page: {shlex.join(words)}", style="dim"))


def jobs_table(jobs: list[Job]) -> Table:
    """One row per job. The tenant and last-error columns appear only when some job has one."""
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    with_tenant = any(job.tenant is not None for job in jobs)
    with_error = any(job.last_error for job in jobs)
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=36)  # whole: ids are meant to be copied
    table.add_column("name", overflow="fold", min_width=12)
    table.add_column("queue", overflow="fold", min_width=7)
    table.add_column("state", no_wrap=True)
    table.add_column("attempt", no_wrap=True, justify="right")
    if with_tenant:
        table.add_column("tenant", overflow="fold", min_width=6)
    table.add_column("created", no_wrap=True)
    table.add_column("run at", no_wrap=True)
    if with_error:
        table.add_column("last error", overflow="ellipsis", no_wrap=True, min_width=12)
    for job in jobs:
        row: list[RenderableType] = [job.id, job.name, job.queue, state_text(job.state)]
        row.append(f"{job.attempt}/{job.max_attempts}")
        if with_tenant:
            row.append(job.tenant or Text("-", style="dim"))
        row += [ago(job.created_at, now), _run_at(job, now)]
        if with_error:
            row.append(Text(_error_line(job.last_error, ERROR_WIDTH), style="red"))
        table.add_row(*row)
    return table


def _run_at(job: Job, now: datetime) -> str:
    if job.run_at > now:
        return ago(job.run_at, now)
    return "due" if job.state in ("ready", "delayed") else ""


def _error_line(error: dict[str, Any] | None, width: int) -> str:
    if not error:
        return ""
    kind, message = error.get("type"), error.get("message")
    text = f"{kind}: {message}" if kind and message else str(kind or message or error)
    return trim(text, width)


@click.command("show")
@click.argument("job_id", metavar="ID")
@json_option
@pass_state
def show_job(state: State, job_id: str, as_json: bool) -> None:
    """Show one job: its payload, result, last error and steps.

    \b
    Example:
      workhorse show 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e --json
    """

    async def fetch(app: App) -> Job:
        job = await app.get_job(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    job = run_with_app(state.app(), fetch)
    if as_json:
        emit_json(job.to_dict())
        return
    stdout().print(job_panel(job))


def job_panel(job: Job) -> Panel:
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def when(value: datetime | None) -> str:
        return "-" if value is None else f"{value.isoformat().replace('+00:00', 'Z')}  ({ago(value, now)})"

    grid.add_row("id", job.id)
    grid.add_row("name", job.name)
    grid.add_row("queue", job.queue)
    grid.add_row("state", state_text(job.state))
    grid.add_row("attempt", f"{job.attempt} of {job.max_attempts}")
    grid.add_row("tenant", job.tenant or "-")
    grid.add_row("priority", str(job.priority))
    if job.key is not None:
        grid.add_row("key", job.key)
    grid.add_row("created", when(job.created_at))
    grid.add_row("run at", when(job.run_at))
    grid.add_row("started", when(job.started_at))
    grid.add_row("finished", when(job.finished_at))
    if job.state in LIVE_STATES and job.worker_id is not None:
        grid.add_row("worker", f"{job.worker_id} (lease until {when(job.lease_expires_at)})")
    grid.add_row("payload", _pretty(job.payload))
    if job.result is not None:
        grid.add_row("result", _pretty(job.result))
    if job.progress is not None:
        grid.add_row("progress", _pretty(job.progress))
    if job.steps:
        grid.add_row("steps", steps_table(job.steps, now))
    else:
        grid.add_row("steps", Text("none", style="dim"))
    parts: list[RenderableType] = [grid]
    if job.last_error:
        parts += [
            Text(""),
            Text("last error", style="bold red"),
            Text(_error_line(job.last_error, 2_000), style="red"),
        ]
        trace = job.last_error.get("traceback")
        if trace:
            parts.append(Text(str(trace).rstrip(), style="dim"))
    return Panel(Group(*parts), title=Text(job.name, style="bold"), title_align="left", expand=False)


STEP_STATE_STYLES = {"done": "green", "failed": "red", "sleeping": "magenta", "waiting": "magenta"}


def steps_table(steps: list[dict[str, Any]], now: datetime) -> Table:
    """One row per recorded step, in run order: state, attempt, when, how long, and what it
    answered (a trimmed result, the error, or what a sleep or wait is suspended on)."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("step", overflow="fold", min_width=12)
    table.add_column("state", no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("result / error", overflow="ellipsis", no_wrap=True, max_width=60)
    for step in steps:
        state = str(step.get("state", "?"))
        started, finished = _when(step.get("started_at")), _when(step.get("finished_at"))
        took = "-" if started is None or finished is None else _span_ms((finished - started).total_seconds())
        table.add_row(
            str(step.get("name", "?")),
            Text(state, style=STEP_STATE_STYLES.get(state, "")),
            str(step.get("attempt", "")),
            ago(started, now) if started is not None else "-",
            took,
            _step_outcome(step, now),
        )
    return table


def _step_outcome(step: dict[str, Any], now: datetime) -> Text:
    state = step.get("state")
    if state in ("sleeping", "waiting"):
        wake = _when(step.get("wake_at"))
        until = "" if wake is None else f" (until {ago(wake, now)})"
        if state == "waiting":
            key = "" if step.get("key") is None else f" key={step['key']}"
            return Text(f"waiting for {step.get('event')}{key}{until}", style="magenta")
        return Text(f"sleeping{until}", style="magenta")
    error = step.get("error")
    if error:
        return Text(_error_line(error, 60), style="red")
    return Text(trim(json.dumps(step.get("result"), ensure_ascii=False, default=str), 60))


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None


def _span_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else span(seconds)


def _pretty(value: Any) -> RenderableType:
    """JSON as JSON: highlighted and indented when it has structure, else its one-line literal."""
    if isinstance(value, dict | list) and value:
        return JSON.from_data(value, indent=2)
    return Text(json.dumps(value, ensure_ascii=False, default=str))


def _verb(
    command: str,
    done: str,
    act: Callable[[App, str], Awaitable[Job]],
    *,
    short: str,
    summary: str,
    example: str,
    json_of: Callable[[Job], Any] = Job.to_dict,
) -> click.Command:
    @click.command(command, help=f"{summary}\n\n\b\nExample:\n  {example}", short_help=short)
    @click.argument("job_id", metavar="ID")
    @json_option
    @pass_state
    def operate(state: State, job_id: str, as_json: bool) -> None:
        job = run_with_app(state.app(), lambda app: act(app, job_id))
        if as_json:
            emit_json(json_of(job))
            return
        stdout().print(Text.assemble((done, "bold"), " ", job.id, " (", job.name, ") ", state_text(job.state)))

    return operate


cancel = _verb(
    "cancel",
    "cancelled",
    App.cancel,
    short="Cancel a job that has not finished.",
    summary="Cancel a job that has not finished. A running job is stopped at its next heartbeat.",
    example="workhorse cancel 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
)


@click.command("requeue", short_help="Run a finished job again.")
@click.argument("job_id", metavar="ID")
@click.option(
    "--from-step",
    "from_step",
    metavar="NAME",
    help="Drop this step and every later one first, so the run calls them again.",
)
@json_option
@pass_state
def requeue(state: State, job_id: str, from_step: str | None, as_json: bool) -> None:
    """Run a finished job (done, failed, dead, cancelled) again, with its attempts reset.

    Its recorded steps replay from the store; with --from-step the named step and every step
    after it are dropped (in the same statement that re-queues the job) and run again.

    \b
    Examples:
      workhorse requeue 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e
      workhorse requeue 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e --from-step send-email
    """
    job = run_with_app(state.app(), lambda app: app.requeue(job_id, from_step=from_step))
    if as_json:
        emit_json(job.to_dict())
        return
    tail = "" if from_step is None else f", from step {from_step}"
    stdout().print(Text.assemble(("requeued", "bold"), " ", job.id, " (", job.name, ") ", state_text(job.state), tail))


promote = _verb(
    "promote",
    "promoted",
    App.promote,
    short="Make a waiting job due now.",
    summary="Make a waiting job (delayed, or backing off before a retry) due now.",
    example="workhorse promote 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
)
remove = _verb(
    "rm",
    "removed",
    App.remove,
    short="Delete a job that is not running.",
    summary='Delete a job that is not running. With --json, prints {"removed": JOB}.',
    example="workhorse rm 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
    json_of=lambda job: {"removed": job.to_dict()},
)

COMMANDS: list[click.Command] = [list_jobs, show_job, cancel, requeue, promote, remove]
