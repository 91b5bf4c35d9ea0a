"""The operator verbs ``cancel``, ``requeue``, ``promote`` and ``rm``, each on one job ID or, with
``--all``, on every job in a state (a bounded batch a call).

Everything here goes through ``app.admin``, which checks every argument before a driver runs; the
command line adds only what is its own: refusing an ID together with ``--all`` (``CLI_USAGE``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.text import Text

from workhorse.app import App
from workhorse.cli.jobs import command_line
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import count, emit_json, state_text, stdout
from workhorse.errors import ConfigurationError
from workhorse.ids import short_id
from workhorse.types import BULK_STATES, MAX_BULK, BulkResult, Job

USAGE = "CLI_USAGE"

F = TypeVar("F", bound=Callable[..., Any])


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
    return Text.assemble((done, "bold"), " ", short_id(job.id), " (", job.name, ") ", state_text(job.state), tail)


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

        async def resolved(app: App) -> Job:
            return await act(app, await app.admin.resolve(one))

        job = run_with_app(state.app(), resolved)
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

    async def resolved(app: App) -> Job:
        return await app.admin.requeue(await app.admin.resolve(one), from_step=from_step)

    job = run_with_app(state.app(), resolved)
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

COMMANDS: list[click.Command] = [cancel, requeue, promote, remove]
