"""Preparing and running: ``migrate`` installs the schema, ``worker`` runs the app's jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any

import click

from workhorse import embedded
from workhorse._db.migrate import script
from workhorse._service import install_stop_signals, remove_stop_signals
from workhorse.app import App
from workhorse.cli.main import State, json_option, pass_state, run_role
from workhorse.cli.output import emit_json, redact, stdout
from workhorse.durations import Duration
from workhorse.leader.scheduler import Scheduler
from workhorse.logs import LOG_FORMATS, LogFormat, formatter
from workhorse.worker import Worker, WorkerStats

STUCK_THREAD_GRACE = 1.0  # seconds a job thread gets to return after the drain before we stop waiting
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")
_QUEUE_COUNT = re.compile(r"^\s*([^=,\s]+)\s*=\s*(\d+)\s*$")


@click.command("migrate")
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL for a DBA to apply by hand; apply nothing.")
@json_option
@pass_state
def migrate(state: State, print_sql: bool, as_json: bool) -> None:
    """Install or upgrade workhorse's tables. Safe to run from many processes at once.

    \b
    Examples:
      workhorse migrate
      workhorse --schema jobs migrate --sql > workhorse.sql
    """
    app = state.app()
    if print_sql:
        text = script(app.schema)
        if as_json:
            emit_json({"schema": app.schema, "sql": text})
        else:
            click.echo(text, nl=False)
        return
    with embedded.creation(allowed=True):  # the command that makes the embedded database
        applied = app.migrate_sync()
    if as_json:
        emit_json({"applied": applied, "schema": app.schema})
    elif applied:
        versions = ", ".join(str(v) for v in applied)
        plural = "s" if len(applied) > 1 else ""
        stdout().print(f"applied migration{plural} {versions} to schema {app.schema}")
    else:
        stdout().print(f"schema {app.schema} is up to date")


@click.command("worker")
@click.option(
    "--queues",
    metavar="A,B",
    help="Comma-separated queues to claim from. Default: every queue with a job declared on the app.",
)
@click.option(
    "--concurrency",
    metavar="N|Q=N,...",
    default="10",
    show_default=True,
    help="Jobs run at once per queue: one number for every queue, or per queue like emails=5,default=20 "
    "(queues not named get 10).",
)
@click.option(
    "--visibility-timeout",
    metavar="DURATION",
    default="30s",
    show_default=True,
    help="How long a claim holds without a heartbeat landing; a dead worker's jobs return after this.",
)
@click.option(
    "--drain-timeout",
    metavar="DURATION",
    default="25s",
    show_default=True,
    help="On SIGTERM/SIGINT, how long running jobs get to finish before they are handed back unspent.",
)
@click.option("--burst", is_flag=True, help="Run until nothing is due, then drain and exit.")
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Do not take part in running cron tasks. By default the worker also runs the scheduler role "
    "(one leader across the fleet fires the app's @app.task schedules); --burst never does.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="The least severe log records written to stderr: info has one line per job outcome, debug adds starts.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="text for people; json for a log shipper: one object a line, with job_id, job, queue, attempt, "
    "outcome, duration_ms, error_type, error_message as keys of their own.",
)
@json_option
@pass_state
def worker(
    state: State,
    *,
    queues: str | None,
    concurrency: str,
    visibility_timeout: str,
    drain_timeout: str,
    burst: bool,
    no_scheduler: bool,
    log_level: str,
    log_format: LogFormat,
    as_json: bool,
) -> None:
    """Run the app's jobs until SIGTERM or SIGINT, then drain.

    Needs --app (or WORKHORSE_APP): the module where your jobs are declared. Logs go to stderr.
    A second signal cuts the drain short. Durations read like 30s, 500ms, 5m or plain seconds.
    Exits 0 after a clean drain, 2 when refused before starting, 1 when the worker failed.

    \b
    Examples:
      workhorse --app myproject.jobs:app worker
      workhorse --app myproject.jobs:app worker --queues emails --concurrency 20
      workhorse --app myproject.jobs:app worker --burst      # cron-driven batch runs
    """
    app = state.app(required=True)
    # The scheduler role runs beside the worker unless refused, in burst mode, or with no task to fire.
    # Then ONE pair of signal handlers (the CLI's) stops both; the worker installs none of its own.
    with_scheduler = not no_scheduler and not burst  # with no task it only folds counters and purges
    options: dict[str, Any] = {"drain_timeout": _duration(drain_timeout)}
    if with_scheduler:
        options["handle_signals"] = False
    runner = app.worker(
        queues=_queues(queues),
        concurrency=_concurrency(concurrency),
        visibility_timeout=_duration(visibility_timeout),
        **options,
    )
    with _logging_to_stderr(getattr(logging, log_level.upper()), log_format):
        logging.getLogger("workhorse.cli").info(
            "workhorse worker %s: app %s, database %s, schema %s%s",
            runner.id,
            state.app_spec,
            redact(app.database_url),
            app.schema,
            " (burst)" if burst else "",
        )
        scheduler = Scheduler(app, handle_signals=False) if with_scheduler else None
        stats = _run(app, runner, burst=burst, scheduler=scheduler)
        if as_json:
            emit_json(stats.as_dict())
        if state.standalone:
            _exit_if_threads_stuck(runner)


def _run(app: App, runner: Worker, *, burst: bool, scheduler: Scheduler | None = None) -> WorkerStats:
    async def body(_app: App) -> WorkerStats:
        if scheduler is None:
            return await runner.run(burst=burst)
        return await _run_with_scheduler(runner, scheduler)

    return run_role(app, body)


async def _run_with_scheduler(runner: Worker, scheduler: Scheduler) -> WorkerStats:
    """The worker and the scheduler role side by side, under one pair of signal handlers.

    First SIGTERM/SIGINT: the worker drains, and the scheduler finishes its round and releases its
    lease at once (it does not wait for the drain). Second: the drain is cut off. A scheduler
    that fails drains the worker too, so the process exits and its supervisor restarts it.
    """
    loop = asyncio.get_running_loop()
    log = logging.getLogger("workhorse.cli")
    received = 0
    stopping: set[asyncio.Task[None]] = set()

    def stop(coroutine: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coroutine)
        stopping.add(task)
        task.add_done_callback(stopping.discard)

    def on_signal(sig: signal.Signals) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.warning("worker %s: %s received, draining; the scheduler steps down", runner.id, sig.name)
            stop(scheduler.stop())
            stop(runner.stop())
        else:
            log.warning("worker %s: %s received again, cutting off the drain now", runner.id, sig.name)
            stop(runner.stop(cut_off=True))

    installed = install_stop_signals(loop, on_signal)
    runner.defer_rescue(lambda: scheduler.leading)  # the leader rescues lapsed leases for this process

    def scheduler_ended(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("worker %s: the scheduler role failed (%r); draining the worker", runner.id, task.exception())
            stop(runner.stop())

    role = loop.create_task(scheduler.run(), name="scheduler")
    role.add_done_callback(scheduler_ended)
    try:
        stats = await runner.run()
    finally:
        await scheduler.stop()  # the worker ended (drained or failed): step the role down too
        remove_stop_signals(loop, installed)
        if stopping:
            await asyncio.gather(*stopping, return_exceptions=True)
    await role  # re-raises what failed the role
    return stats


@contextlib.contextmanager
def _logging_to_stderr(level: int, fmt: LogFormat) -> Iterator[None]:
    """Logs at ``level`` and above to stderr in ``fmt`` while the worker runs, unless the app
    module configured logging itself."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def _exit_if_threads_stuck(runner: Worker) -> None:
    """End the process now if a plain-``def`` job body is still running after the drain.

    A thread cannot be interrupted: a sync body that ignores ``ctx.cancelled`` keeps running after
    its attempt was handed back. The interpreter joins worker-pool threads at exit, so that body
    would hold the process (and its deployment's restart) forever. Its attempt is already settled
    and nothing it returns will be written, so leaving without it is safe.
    """
    prefix = f"workhorse-{runner.id}"
    deadline = time.monotonic() + STUCK_THREAD_GRACE
    stuck: list[threading.Thread] = []
    for thread in threading.enumerate():
        if thread.name.startswith(prefix) and not thread.daemon:
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                stuck.append(thread)
    if not stuck:
        return
    logging.getLogger("workhorse.cli").warning(
        "worker %s: %d job thread(s) still running after the drain; exiting without them",
        runner.id,
        len(stuck),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _queues(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise click.BadParameter("expected queue names separated by commas, like emails,default", param_hint="--queues")
    return names


def _concurrency(value: str) -> int | dict[str, int]:
    if value.strip().isdigit():
        return int(value)
    counts: dict[str, int] = {}
    for part in value.split(","):
        match = _QUEUE_COUNT.match(part)
        if match is None:
            raise click.BadParameter(
                f"expected a number or QUEUE=N pairs like emails=5,default=20, got {value!r}",
                param_hint="--concurrency",
            )
        counts[match.group(1)] = int(match.group(2))
    return counts


def _duration(value: str) -> Duration:
    """Plain numbers are seconds; anything else goes to the library, which names what it accepts."""
    return float(value) if _NUMBER.match(value) else value
