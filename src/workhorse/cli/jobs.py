"""Inspecting jobs: ``ls`` (a page at a time, newest first) and ``show`` (one job: its payload,
result, progress, steps and errors). The operator verbs are ``cli/verbs.py``.

Everything here goes through ``app.admin``, which checks every argument before a driver runs; the
command line adds only what is its own: reading times and durations.
"""

from __future__ import annotations

import difflib
import json
import shlex
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.highlighter import JSONHighlighter
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workhorse.admin import DEFAULT_PAGE, MAX_PAGE
from workhorse.app import App
from workhorse.cli.columns import Column, fit, hidden_note
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import (
    ago,
    emit_json,
    json_text,
    progress_line,
    span,
    state_text,
    stdout,
    styled,
    trim,
)
from workhorse.drivers.base import SEARCH_SCAN
from workhorse.durations import to_seconds
from workhorse.errors import ConfigurationError, JobNotFoundError
from workhorse.ids import short_id
from workhorse.logs import visible
from workhorse.search import parse_payload_search
from workhorse.types import ALL_STATES, LIVE_STATES, Job, Page

ERROR_WIDTH = 96  # characters of the last error `ls` shows at most (less when the terminal is narrower)
PROGRESS_WIDTH = 32
PANEL_EDGES = 4  # a panel's border and padding, both sides


def command_line(state: State, *words: str) -> str:
    """A ``workhorse ...`` command a person can paste: the root options that pick the app and the
    schema (never the database URL: it may hold a password), then ``words``."""
    prefix = ["workhorse"]
    for option, value in (("--app", state.app_spec), ("--schema", state.schema)):
        if value is not None:
            prefix += [option, value]
    return shlex.join([*prefix, *words])


def instant(value: str | None, option: str) -> datetime | None:
    """``--created-from``/``--created-to``: ISO 8601 (``Z`` or an offset; a naive time is UTC), or
    a duration meaning that long ago (``2h``, ``30m``, ``1d``)."""
    if value is None:
        return None
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        pass
    try:
        seconds = to_seconds(text, what=option)
        now = datetime.now(UTC)  # clock-ok: "2h" is the operator's "two hours before now", for a filter
        return now - timedelta(seconds=seconds)
    except (ConfigurationError, OverflowError):
        raise ConfigurationError(
            code="TIME_INVALID",
            cause=f"{option} expected an ISO 8601 time (2026-01-31T09:00Z, an offset, or a naive time read "
            f"as UTC) or a duration meaning that long ago (30m, 2h, 1d), got {value!r}",
            fix=f"workhorse ls {option} 2h   # or: workhorse ls {option} 2026-01-31T09:00Z",
        ) from None


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@click.command("ls")
@click.option("--state", "state_filter", metavar="STATE", help=f"Only jobs in this state: {', '.join(ALL_STATES)}.")
@click.option("--queue", metavar="QUEUE", help="Only jobs on this queue.")
@click.option(
    "--name",
    metavar="NAME",
    help="Only jobs of this name (module.function unless named); a name without a dot also matches the "
    "last part of a module-qualified one (send_receipt: shop.jobs.send_receipt).",
)
@click.option("--tenant", metavar="TENANT", help="Only this tenant's jobs.")
@click.option("--id-prefix", metavar="HEX", help="Only jobs whose id starts with these hex digits (dashes optional).")
@click.option(
    "--created-from",
    metavar="WHEN",
    help="Only jobs created at or after WHEN: ISO 8601 (2026-01-31T09:00Z; naive is UTC) or a duration ago (2h).",
)
@click.option("--created-to", metavar="WHEN", help="Only jobs created before WHEN (same forms as --created-from).")
@click.option(
    "--payload",
    metavar="FIELD=VALUE",
    help="Search: jobs whose payload has this field and value (customer.id=7; or a JSON object). "
    f"Each page examines at most {SEARCH_SCAN:,} jobs; `next page` searches on.",
)
@click.option("--error", metavar="TEXT", help="Search: jobs whose last error's type or message contains TEXT.")
@click.option(
    "--limit",
    type=int,
    default=DEFAULT_PAGE,
    show_default=True,
    metavar="N",
    help=f"Jobs per page, 1 to {MAX_PAGE}.",
)
@click.option("--after", metavar="CURSOR", help="The page of older jobs after this cursor: a page's `next`.")
@click.option("--before", metavar="CURSOR", help="The page of newer jobs before this cursor: a page's `prev`.")
@json_option
@pass_state
def list_jobs(
    state: State,
    *,
    state_filter: str | None,
    queue: str | None,
    name: str | None,
    tenant: str | None,
    id_prefix: str | None,
    created_from: str | None,
    created_to: str | None,
    payload: str | None,
    error: str | None,
    limit: int,
    after: str | None,
    before: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first, one page at a time.

    The table shows times relative to now and each running job's last progress report. The
    footer prints the exact command for the next (older) and previous (newer) page; with --json
    follow `next` with --after and `prev` with --before.

    \b
    Examples:
      workhorse ls --state dead
      workhorse ls --queue emails --created-from 2h --limit 20 --json
      workhorse ls --id-prefix 0190f1c2
      workhorse ls --state dead --error "timed out"
      workhorse ls --payload order_id=4242
      workhorse ls --created-from 2026-01-31T09:00Z --created-to 2026-01-31T10:00Z
      workhorse ls --after 0190f1c2-...        # the next (older) page
      workhorse ls --before 0190f1c2-...       # the previous (newer) page
    """
    start = instant(created_from, "--created-from")
    end = instant(created_to, "--created-to")
    searched = None if payload is None else parse_payload_search(payload)
    app_of_jobs = state.app()
    known = set(app_of_jobs.jobs)  # with --app, its declared names: a ready job of another name waits forever
    page: Page = run_with_app(
        app_of_jobs,
        lambda app: app.admin.list(
            state=state_filter,
            queue=queue,
            name=name if name is None or "." in name else None,
            name_part=name if name is not None and "." not in name else None,
            tenant=tenant,
            id_prefix=id_prefix,
            created_from=start,
            created_to=end,
            payload=searched,
            error=error,
            limit=limit,
            after=after,
            before=before,
        ),
    )
    if as_json:
        emit_json(page.to_dict())
        return
    console = stdout()
    words = ["ls"]
    for option, value in (
        ("--state", state_filter),
        ("--queue", queue),
        ("--name", name),
        ("--tenant", tenant),
        ("--id-prefix", id_prefix),
        ("--created-from", None if start is None else _iso(start)),
        ("--created-to", None if end is None else _iso(end)),
        ("--payload", payload),
        ("--error", error),
    ):
        if value is not None:
            words += [option, value]
    if limit != DEFAULT_PAGE:
        words += ["--limit", str(limit)]
    searched_note = (
        None
        if page.scanned is None
        else Text(f"searched {page.scanned:,} jobs (at most {SEARCH_SCAN:,} a page)", style="dim")
    )
    if not page.jobs:
        filtered = after is not None or before is not None or len(words) > 1
        console.print("no jobs match" if filtered else "no jobs yet")
        if searched_note is not None:
            console.print(searched_note)
        if page.next is not None:  # a search spent its page's budget: older jobs are still to search
            console.print(Text(f"search on: {command_line(state, *words, '--after', page.next)}", style="dim"))
        if name is not None and (close := _close_names(name, known)):
            console.print(f"did you mean {' or '.join(close)}? (declared on the app)")
        return
    table, hidden = jobs_table(page.jobs, known=known)
    console.print(table)
    if (note := hidden_note(hidden, console.width)) is not None:
        console.print(note)
    if searched_note is not None:
        console.print(searched_note)
    if known and any(job.name not in known and job.state == "ready" for job in page.jobs):
        console.print(
            Text(
                "unknown: no job of that name is declared on the app, so no worker of it will run these; "
                "check the name (a script run as __main__?) or the --app",
                style="yellow",
            )
        )
    if page.prev is not None:
        console.print(Text(f"previous page: {command_line(state, *words, '--before', page.prev)}", style="dim"))
    if page.next is not None:
        console.print(Text(f"next page: {command_line(state, *words, '--after', page.next)}", style="dim"))


def _close_names(name: str, known: set[str]) -> list[str]:
    """Declared names a mistyped ``--name`` may mean: those ending in its last part, else close ones."""
    tail = name.rsplit(".", 1)[-1]
    ending = sorted(k for k in known if k == tail or k.endswith("." + tail))
    return ending[:3] or difflib.get_close_matches(name, sorted(known), n=3)


def jobs_table(jobs: list[Job], *, known: set[str] | None = None) -> tuple[Table, list[str]]:
    """One row per job, fitted to the terminal (``cli.columns``): the short id, name, queue and
    state always, whole; then, as they fit, the last error, progress, attempt, times and tenant
    (each only when some job has one). Answers the table and the headers left out. With ``known``
    (the app's declared names), a live job of another name is marked unknown."""
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    names: list[RenderableType] = []
    for job in jobs:
        if known and job.name not in known and job.state in ("ready", "delayed", "suspended"):
            names.append(Text.assemble(visible(job.name), (" (unknown)", "yellow")))
        else:
            names.append(job.name)
    columns = [
        Column("id", [short_id(job.id) for job in jobs], key=True),  # the short form every command takes
        Column("name", names, key=True),
        Column("queue", [job.queue for job in jobs], key=True),
        Column("state", [_state(job, now) for job in jobs], key=True),
        Column("attempt", [f"{job.attempt}/{job.max_attempts}" for job in jobs], priority=3, justify="right"),
    ]
    if any(job.tenant is not None for job in jobs):
        tenants = [job.tenant or Text("-", style="dim") for job in jobs]
        columns.append(Column("tenant", tenants, priority=6, shrinks=8))
    columns += [
        Column("created", [ago(job.created_at, now) for job in jobs], priority=4),
        Column("run at", [_run_at(job, now) for job in jobs], priority=5),
    ]
    if any(job.progress for job in jobs):
        progress = [styled(progress_line(job.progress), style="" if job.progress else "dim") for job in jobs]
        columns.append(Column("progress", progress, priority=2, shrinks=12, most=PROGRESS_WIDTH))
    if any(job.last_error for job in jobs):  # a dead job's error is why one looks: it goes first
        errors = [styled(_error_line(job.last_error, 500), style=_error_style(job)) for job in jobs]
        columns.append(Column("last error", errors, priority=1, shrinks=16, most=ERROR_WIDTH))
    return fit(columns, stdout().width)


def _state(job: Job, now: datetime) -> RenderableType:
    """The job's state; a running one whose lease lapsed says so, and how long ago."""
    state = state_text(job.state)
    if job.lease_lapsed:  # running on the row, but its worker stopped renewing the lease
        return Text.assemble(state, (f" (lease lapsed {ago(job.lease_expires_at, now)})", "bold red"))
    return state


def _error_style(job: Job) -> str:
    """Red for a job the error ended or holds back; dim for one that succeeded after it (a retry)."""
    return "dim" if job.state == "done" else "red"


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


@click.command("show", short_help="Show one job: payload, result, progress, steps, errors.")
@click.argument("job_id", metavar="ID")
@json_option
@pass_state
def show_job(state: State, job_id: str, as_json: bool) -> None:
    """Show one job: its payload, result, progress, steps, and the errors of its failed attempts.

    \b
    Examples:
      workhorse show 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e
      workhorse show 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e --json
    """

    async def fetch(app: App) -> tuple[Job, list[str], list[dict[str, Any]]]:
        job = await app.admin.get(await app.admin.resolve(job_id))
        if job is None:
            raise JobNotFoundError(job_id)
        return job, await app.admin.why_waiting(job), await app.admin.edges(job.id)

    job, waiting, edges = run_with_app(state.app(), fetch)
    # Caps are declared on the App: without --app, what holds a job back is unknown, not nothing.
    held: list[str] | None = waiting if state.app_spec is not None else None
    if as_json:
        emit_json(
            {
                **job.to_dict(),
                "held_back": held,
                "dependencies": [e["id"] for e in edges if e["side"] == "dependency"],
                "dependents": [e["id"] for e in edges if e["side"] == "dependent"],
            }
        )
        return
    stdout().print(job_panel(job, held, edges))


CAPS_UNKNOWN = "unknown without --app (caps are declared on the App)"


def edge_lines(edges: list[dict[str, Any]], side: str) -> Text:
    """One line per dependency (or dependent): short id, name, state."""
    lines = [f"{short_id(e['id'])}  {e['name'] or '?'}  {e['state'] or 'purged'}" for e in edges if e["side"] == side]
    return Text("\n".join(lines))


def job_panel(job: Job, waiting: list[str] | None = None, edges: list[dict[str, Any]] | None = None) -> Panel:
    """One job in full. ``waiting``: the caps holding a due ready job back; None when unknown
    (no --app)."""
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def when(value: datetime | None) -> str:
        return "-" if value is None else f"{value.isoformat().replace('+00:00', 'Z')}  ({ago(value, now)})"

    grid.add_row("id", Text.assemble(job.id, (f"  (short: {short_id(job.id)})", "dim")))
    grid.add_row("name", job.name)
    grid.add_row("queue", job.queue)
    grid.add_row("state", state_text(job.state))
    if waiting:  # a due ready job a full fleet-wide cap holds back
        grid.add_row("held back", Text("\n".join(waiting), style="yellow"))
    elif waiting is None and job.state == "ready":
        grid.add_row("held back", Text(CAPS_UNKNOWN, style="dim"))
    for side, label in (("dependency", "dependencies"), ("dependent", "dependents")):
        if edges and any(e["side"] == side for e in edges):
            grid.add_row(label, edge_lines(edges, side))
    grid.add_row("attempt", Text.assemble(f"{job.attempt} of {job.max_attempts}", (ran_note(job), "dim")))
    handed = job.handed_back
    if handed:  # a drain's hand-back (or ctx.hand_back()): when, by whom, why; the attempt unspent
        at = _when(handed.get("at"))
        who = f" by worker {handed.get('worker')}" if handed.get("worker") else ""
        grid.add_row("handed back", f"{when(at)}{who}, attempt {handed.get('attempt', '?')}: {handed.get('reason')}")
    grid.add_row("tenant", job.tenant or "-")
    grid.add_row("priority", str(job.priority))
    if job.key is not None:
        grid.add_row("key", job.key)
    if job.flow_key is not None:
        grid.add_row("concurrency key", job.flow_key)
    grid.add_row("created", when(job.created_at))
    grid.add_row("run at", when(job.run_at))
    grid.add_row("started", when(job.started_at))
    grid.add_row("finished", when(job.finished_at))
    if job.lease_lapsed:
        holder = "its worker" if job.worker_id is None else f"its worker {job.worker_id}"
        grid.add_row(
            "lease",
            Text(
                f"lapsed {when(job.lease_expires_at)}: {holder} stopped renewing it (it died or froze); "
                "a claim or the rescuer recovers the job, spending the attempt",
                style="bold red",
            ),
        )
    elif job.state in LIVE_STATES and job.worker_id is not None:
        grid.add_row("worker", f"{job.worker_id} (lease until {when(job.lease_expires_at)})")
    grid.add_row("payload", _pretty(job.payload))
    if job.result is not None:
        grid.add_row("result", _pretty(job.result))
    if job.progress is not None:
        reported = _when(job.progress.get("at"))
        tail = "" if reported is None else f"  (reported {ago(reported, now)})"
        if handed and job.state in ("ready", "delayed"):
            tail += ", before the hand-back"
        grid.add_row("progress", progress_line(job.progress) + tail)
    if not job.steps:
        grid.add_row("steps", Text("none", style="dim"))
    parts: list[RenderableType] = [grid]
    if job.steps:  # below the grid, the panel's whole width: the step names stay whole
        steps, hidden = steps_table(job.steps, now, stdout().width - PANEL_EDGES)
        parts += [Text(""), Text("steps (in run order)", style="bold"), steps]
        if (note := hidden_note(hidden, stdout().width - PANEL_EDGES)) is not None:
            parts.append(note)
    if job.errors:
        parts += [Text(""), Text("errors of failed attempts (oldest first)", style="bold red")]
        parts.append(errors_table(job.errors, now))
    if job.last_error:
        parts += [
            Text(""),
            Text("last error", style="bold red"),
            styled(_error_line(job.last_error, 2_000), style="red"),
        ]
        trace = job.last_error.get("traceback")
        if trace:
            parts.append(styled(str(trace).rstrip(), style="dim"))
    return Panel(Group(*parts), title=styled(job.name, style="bold"), title_align="left", expand=False)


def ran_note(job: Job) -> str:
    """For a job claimed more times than it spent attempts (suspended by a step, handed back by a
    drain), how often it ran: "attempt 0 of 5" alone would read as never run."""
    if job.claims <= job.attempt:
        return ""
    times = "once" if job.claims == 1 else f"{job.claims} times"
    return f"  (ran {times}; a suspension or hand-back spends no attempt)"


def errors_table(errors: list[dict[str, Any]], now: datetime) -> Table:
    """One row per failed attempt kept (``Job.errors``): attempt, when, and ``type: message``."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("error", overflow="fold")
    for error in errors:
        at = _when(error.get("at"))
        table.add_row(
            str(error.get("attempt", "?")),
            ago(at, now) if at is not None else "-",
            styled(_error_line(error, 200), style="red"),
        )
    return table


STEP_STATE_STYLES = {"done": "green", "failed": "red", "sleeping": "magenta", "waiting": "magenta"}


def steps_table(steps: list[dict[str, Any]], now: datetime, width: int) -> tuple[Table, list[str]]:
    """One row per recorded step, in run order, fitted to ``width``: the step's name and state
    always, whole; then what it answered (a trimmed result, the error, or what a sleep or wait is
    suspended on), when it started, how long it took and its attempt, as they fit."""
    names, states, attempts, starts, took, outcomes = [], [], [], [], [], []
    for step in steps:
        state = str(step.get("state", "?"))
        started, finished = _when(step.get("started_at")), _when(step.get("finished_at"))
        names.append(str(step.get("name", "?")))
        states.append(styled(state, style=STEP_STATE_STYLES.get(state, "")))
        attempts.append(str(step.get("attempt", "")))
        starts.append(ago(started, now) if started is not None else "-")
        took.append("-" if started is None or finished is None else _span_ms((finished - started).total_seconds()))
        outcomes.append(_step_outcome(step, now))
    columns = [
        Column("step", names, key=True),
        Column("state", states, key=True),
        Column("attempt", attempts, priority=4, justify="right"),
        Column("started", starts, priority=2),
        Column("took", took, priority=3, justify="right"),
        Column("result / error", outcomes, priority=1, shrinks=12, most=60),
    ]
    return fit(columns, width)


def _step_outcome(step: dict[str, Any], now: datetime) -> Text:
    state = step.get("state")
    if state in ("sleeping", "waiting"):
        wake = _when(step.get("wake_at"))
        until = "" if wake is None else f" (until {ago(wake, now)})"
        if state == "waiting":
            key = "" if step.get("key") is None else f" key={step['key']}"
            return styled(f"waiting for {step.get('event')}{key}{until}", style="magenta")
        return Text(f"sleeping{until}", style="magenta")
    error = step.get("error")
    if error:
        return styled(_error_line(error, 60), style="red")
    return styled(trim(json.dumps(step.get("result"), ensure_ascii=False, default=str), 60))


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None


def _span_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else span(seconds)


def _pretty(value: Any) -> RenderableType:
    """JSON as JSON: highlighted and indented when it has structure, else its one-line literal."""
    if isinstance(value, dict | list) and value:
        text = JSONHighlighter()(json_text(value, indent=2))  # as rich.json.JSON, with C1 escaped too
        text.no_wrap, text.overflow = True, None
        return text
    return styled(json_text(value))


COMMANDS: list[click.Command] = [list_jobs, show_job]
