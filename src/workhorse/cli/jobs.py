"""Inspecting jobs (``ls``, ``show``) and the operator verbs ``cancel``, ``requeue``, ``promote``
and ``rm``, each on one job ID or, with ``--all``, on every job in a state (a bounded batch a call).

Everything here goes through ``app.admin``, which checks every argument before a driver runs; the
command line adds only what is its own: reading times and durations, and refusing an ID together
with ``--all`` (``CLI_USAGE``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workhorse.admin import DEFAULT_PAGE, MAX_PAGE
from workhorse.app import App
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, count, emit_json, progress_line, span, state_text, stdout, trim
from workhorse.drivers.base import ALL_STATES, BULK_STATES, LIVE_STATES, MAX_BULK, BulkResult, Job, Page
from workhorse.durations import to_seconds
from workhorse.errors import ConfigurationError, JobNotFoundError

ERROR_WIDTH = 48
PROGRESS_WIDTH = 32
USAGE = "CLI_USAGE"

F = TypeVar("F", bound=Callable[..., Any])


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
@click.option("--name", metavar="NAME", help="Only jobs of this name (module.function unless named).")
@click.option("--tenant", metavar="TENANT", help="Only this tenant's jobs.")
@click.option("--id-prefix", metavar="HEX", help="Only jobs whose id starts with these hex digits (dashes optional).")
@click.option(
    "--created-from",
    metavar="WHEN",
    help="Only jobs created at or after WHEN: ISO 8601 (2026-01-31T09:00Z; naive is UTC) or a duration ago (2h).",
)
@click.option("--created-to", metavar="WHEN", help="Only jobs created before WHEN (same forms as --created-from).")
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
      workhorse ls --created-from 2026-01-31T09:00Z --created-to 2026-01-31T10:00Z
      workhorse ls --after 0190f1c2-...        # the next (older) page
      workhorse ls --before 0190f1c2-...       # the previous (newer) page
    """
    start = instant(created_from, "--created-from")
    end = instant(created_to, "--created-to")
    page: Page = run_with_app(
        state.app(),
        lambda app: app.admin.list(
            state=state_filter,
            queue=queue,
            name=name,
            tenant=tenant,
            id_prefix=id_prefix,
            created_from=start,
            created_to=end,
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
    ):
        if value is not None:
            words += [option, value]
    if limit != DEFAULT_PAGE:
        words += ["--limit", str(limit)]
    if not page.jobs:
        filtered = after is not None or before is not None or len(words) > 1
        console.print("no jobs match" if filtered else "no jobs yet")
        return
    console.print(jobs_table(page.jobs))
    if page.prev is not None:
        console.print(Text(f"previous page: {command_line(state, *words, '--before', page.prev)}", style="dim"))
    if page.next is not None:
        console.print(Text(f"next page: {command_line(state, *words, '--after', page.next)}", style="dim"))


def jobs_table(jobs: list[Job]) -> Table:
    """One row per job. The tenant, progress and last-error columns appear only when some job has one."""
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    with_tenant = any(job.tenant is not None for job in jobs)
    with_progress = any(job.progress for job in jobs)
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
    if with_progress:
        table.add_column("progress", overflow="ellipsis", no_wrap=True, min_width=8)
    if with_error:
        table.add_column("last error", overflow="ellipsis", no_wrap=True, min_width=12)
    for job in jobs:
        row: list[RenderableType] = [job.id, job.name, job.queue, state_text(job.state)]
        row.append(f"{job.attempt}/{job.max_attempts}")
        if with_tenant:
            row.append(job.tenant or Text("-", style="dim"))
        row += [ago(job.created_at, now), _run_at(job, now)]
        if with_progress:
            row.append(Text(progress_line(job.progress, PROGRESS_WIDTH), style="" if job.progress else "dim"))
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

    async def fetch(app: App) -> Job:
        job = await app.admin.get(job_id)
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
        reported = _when(job.progress.get("at"))
        tail = "" if reported is None else f"  (reported {ago(reported, now)})"
        grid.add_row("progress", progress_line(job.progress) + tail)
    if job.steps:
        grid.add_row("steps", steps_table(job.steps, now))
    else:
        grid.add_row("steps", Text("none", style="dim"))
    parts: list[RenderableType] = [grid]
    if job.errors:
        parts += [Text(""), Text("errors of failed attempts (oldest first)", style="bold red")]
        parts.append(errors_table(job.errors, now))
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
            Text(_error_line(error, 200), style="red"),
        )
    return table


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


# -- the operator verbs: one ID, or --all in a state ----------------------------------------------

BULK_HELP = (
    "With --all instead of an ID it acts on every job in --state (narrowed by --queue, --name, "
    f"--tenant), oldest first, at most --limit ({MAX_BULK:,}) a call, and prints how many moved and "
    "how many remain: run it again until none do. --dry-run counts and changes nothing."
)
PAST = {"cancel": "cancelled", "requeue": "requeued", "promote": "promoted", "rm": "removed"}
EXAMPLE_STATE = {"cancel": "ready", "requeue": "dead", "promote": "delayed", "rm": "dead"}
# The admin's verb for each command (``rm`` is ``remove``), also the infinitive a dry run prints.
ADMIN_VERB = {"cancel": "cancel", "requeue": "requeue", "promote": "promote", "rm": "remove"}


@dataclass(frozen=True)
class Scope:
    """What ``--all`` and the options narrowing it asked for."""

    all: bool
    state: str | None
    queue: str | None
    name: str | None
    tenant: str | None
    limit: int | None
    dry_run: bool

    def narrowing(self) -> list[str]:
        """The options given that only mean something with --all."""
        given = {
            "--state": self.state is not None,
            "--queue": self.queue is not None,
            "--name": self.name is not None,
            "--tenant": self.tenant is not None,
            "--limit": self.limit is not None,
            "--dry-run": self.dry_run,
        }
        return [option for option, on in given.items() if on]

    def words(self) -> list[str]:
        """The --all options as a command line repeats them (without --dry-run)."""
        words = ["--all"]
        for option, value in (
            ("--state", self.state),
            ("--queue", self.queue),
            ("--name", self.name),
            ("--tenant", self.tenant),
        ):
            if value is not None:
                words += [option, value]
        if self.limit is not None:
            words += ["--limit", str(self.limit)]
        return words


def bulk_options(command: str) -> Callable[[F], F]:
    """The ID argument (optional) and --all with its narrowing options, for one operator verb."""
    states = ", ".join(sorted(BULK_STATES[ADMIN_VERB[command]]))
    options = [
        click.argument("job_id", metavar="[ID]", required=False),
        click.option("--all", "all_jobs", is_flag=True, help="Act on every job in --state instead of one ID."),
        click.option("--state", "state_filter", metavar="STATE", help=f"With --all (required): {states}."),
        click.option("--queue", metavar="QUEUE", help="With --all: only jobs on this queue."),
        click.option("--name", metavar="NAME", help="With --all: only jobs of this name."),
        click.option("--tenant", metavar="TENANT", help="With --all: only this tenant's jobs."),
        click.option(
            "--limit",
            type=int,
            metavar="N",
            help=f"With --all: move at most N jobs this call, 1 to {MAX_BULK:,} [default: {MAX_BULK:,}].",
        ),
        click.option("--dry-run", is_flag=True, help="With --all: count what would move; change nothing."),
    ]

    def decorate(fn: F) -> F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _usage(cause: str, fix: str) -> ConfigurationError:
    return ConfigurationError(code=USAGE, cause=cause, fix=fix)


def check_target(command: str, job_id: str | None, scope: Scope) -> None:
    """An operator verb takes one ID, or --all with --state; anything else is refused (CLI_USAGE)
    before a connection is opened, so a refused call changes nothing."""
    example = f"workhorse {command} --all --state {EXAMPLE_STATE[command]} --dry-run"
    if job_id is not None and scope.all:
        raise _usage(
            f"{command} takes one job ID or --all, not both (got ID {job_id!r} and --all)",
            f"workhorse {command} {job_id}   # one job; or every job in a state: {example}",
        )
    if job_id is None and not scope.all:
        raise _usage(
            f"{command} needs a job ID, or --all with --state for every job in a state",
            f"workhorse {command} ID   # or: {example}",
        )
    if scope.all and scope.state is None:
        raise _usage(
            f"{command} --all needs --state: it acts on the jobs of one state "
            f"({', '.join(sorted(BULK_STATES[ADMIN_VERB[command]]))})",
            example,
        )
    if job_id is not None and scope.narrowing():
        raise _usage(
            f"{', '.join(scope.narrowing())} only narrow{'s' if len(scope.narrowing()) == 1 else ''} --all; "
            f"with one job ID {'it means' if len(scope.narrowing()) == 1 else 'they mean'} nothing",
            f"workhorse {command} {job_id}   # or: {example}",
        )


def run_bulk(state: State, command: str, scope: Scope, *, as_json: bool) -> None:
    """Call the admin's bulk verb once and report ``affected`` and ``remaining``."""
    assert scope.state is not None  # check_target refused it otherwise

    def act(app: App) -> Awaitable[BulkResult]:
        admin = app.admin
        verb = {
            "cancel": admin.cancel_many,
            "requeue": admin.requeue_many,
            "promote": admin.promote_many,
            "rm": admin.remove_many,
        }[command]
        return verb(
            state=scope.state or "",
            queue=scope.queue,
            name=scope.name,
            tenant=scope.tenant,
            limit=MAX_BULK if scope.limit is None else scope.limit,
            dry_run=scope.dry_run,
        )

    result: BulkResult = run_with_app(state.app(), act)
    if as_json:
        emit_json(result.to_dict())
        return
    console = stdout()
    moved = count(result.affected, "job")
    if result.dry_run:
        rest = "none would remain" if result.remaining == 0 else f"{result.remaining:,} would remain for another call"
        console.print(f"would {ADMIN_VERB[command]} {moved}; {rest} (dry run: nothing changed)")
        return
    if result.remaining == 0:
        console.print(f"{PAST[command]} {moved}; none remain")
        return
    remain = "1 remains" if result.remaining == 1 else f"{result.remaining:,} remain"
    console.print(f"{PAST[command]} {moved}; {remain} — run it again")
    console.print(Text(f"next: {command_line(state, command, *scope.words())}", style="dim"))


def _done_line(done: str, job: Job, tail: str = "") -> Text:
    return Text.assemble((done, "bold"), " ", job.id, " (", job.name, ") ", state_text(job.state), tail)


def _verb(
    command: str,
    act: Callable[[App, str], Awaitable[Job]],
    *,
    short: str,
    summary: str,
    examples: list[str],
    json_of: Callable[[Job], Any] = Job.to_dict,
) -> click.Command:
    example_lines = "\n".join(f"  {line}" for line in examples)

    @click.command(command, help=f"{summary}\n\n{BULK_HELP}\n\n\b\nExamples:\n{example_lines}", short_help=short)
    @bulk_options(command)
    @json_option
    @pass_state
    def operate(
        state: State,
        job_id: str | None,
        *,
        all_jobs: bool,
        state_filter: str | None,
        queue: str | None,
        name: str | None,
        tenant: str | None,
        limit: int | None,
        dry_run: bool,
        as_json: bool,
    ) -> None:
        scope = Scope(all_jobs, state_filter, queue, name, tenant, limit, dry_run)
        check_target(command, job_id, scope)
        if job_id is None:
            run_bulk(state, command, scope, as_json=as_json)
            return
        one = job_id
        job = run_with_app(state.app(), lambda app: act(app, one))
        if as_json:
            emit_json(json_of(job))
            return
        stdout().print(_done_line(PAST[command], job))

    return operate


cancel = _verb(
    "cancel",
    lambda app, job_id: app.admin.cancel(job_id),
    short="Cancel a job (or --all in a state) that has not finished.",
    summary="Cancel a job that has not finished. A running job's worker is notified and stops its body.",
    examples=[
        "workhorse cancel 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
        "workhorse cancel --all --state ready --queue emails --dry-run",
    ],
)


@click.command("requeue", short_help="Run a finished job (or --all in a state) again.")
@bulk_options("requeue")
@click.option(
    "--from-step",
    "from_step",
    metavar="NAME",
    help="With an ID: drop this step and every later one first, so the run calls them again.",
)
@json_option
@pass_state
def requeue(
    state: State,
    job_id: str | None,
    *,
    all_jobs: bool,
    state_filter: str | None,
    queue: str | None,
    name: str | None,
    tenant: str | None,
    limit: int | None,
    dry_run: bool,
    from_step: str | None,
    as_json: bool,
) -> None:
    """Run a finished job (done, failed, dead, cancelled) again, with its attempts reset.

    Its recorded steps replay from the store; with --from-step the named step and every step
    after it are dropped (in the same statement that re-queues the job) and run again.

    With --all instead of an ID it requeues every job in --state (narrowed by --queue, --name,
    --tenant), oldest first, at most --limit (1,000) a call, and prints how many moved and how
    many remain: run it again until none do. A job whose idempotency key a live job holds stays
    where it is. --dry-run counts and changes nothing.

    \b
    Examples:
      workhorse requeue 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e
      workhorse requeue 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e --from-step send-email
      workhorse requeue --all --state dead --queue emails --dry-run
      workhorse requeue --all --state dead --name billing.charge --limit 100
    """
    scope = Scope(all_jobs, state_filter, queue, name, tenant, limit, dry_run)
    check_target("requeue", job_id, scope)
    if job_id is None:
        if from_step is not None:
            raise _usage(
                "--from-step applies to one job's recorded steps; it cannot go with --all",
                f"workhorse requeue ID --from-step {from_step}   # or, without it: "
                + command_line(state, "requeue", *scope.words()),
            )
        run_bulk(state, "requeue", scope, as_json=as_json)
        return
    one = job_id
    job = run_with_app(state.app(), lambda app: app.admin.requeue(one, from_step=from_step))
    if as_json:
        emit_json(job.to_dict())
        return
    stdout().print(_done_line("requeued", job, "" if from_step is None else f", from step {from_step}"))


promote = _verb(
    "promote",
    lambda app, job_id: app.admin.promote(job_id),
    short="Make a waiting job (or --all in a state) due now.",
    summary="Make a waiting job (delayed, or backing off before a retry) due now.",
    examples=[
        "workhorse promote 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
        "workhorse promote --all --state delayed --queue emails",
    ],
)
remove = _verb(
    "rm",
    lambda app, job_id: app.admin.remove(job_id),
    short="Delete a job (or --all in a state) that is not running.",
    summary='Delete a job that is not running, with its steps. With --json, prints {"removed": JOB}.',
    examples=[
        "workhorse rm 0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e",
        "workhorse rm --all --state done --queue emails --dry-run",
    ],
    json_of=lambda job: {"removed": job.to_dict()},
)

COMMANDS: list[click.Command] = [list_jobs, show_job, cancel, requeue, promote, remove]
