"""Cron tasks: ``scheduler`` runs the role alone, ``tasks`` shows every task and the leader."""

from __future__ import annotations

import logging
from datetime import datetime

import click
from rich.text import Text

from workhorse.cli.columns import Column, fit, hidden_note
from workhorse.cli.main import State, json_option, pass_state, run_role, run_with_app
from workhorse.cli.output import ago, emit_json, redact, stdout, styled
from workhorse.cli.run import _duration, _logging_to_stderr
from workhorse.errors import ConfigurationError
from workhorse.leader.report import TasksReport
from workhorse.leader.scheduler import Scheduler
from workhorse.leader.tasks import iso


@click.command("scheduler")
@click.option(
    "--lease",
    metavar="DURATION",
    default="30s",
    show_default=True,
    help="How long a leadership holds without renewal; a crashed leader is replaced within it.",
)
@click.option(
    "--interval",
    metavar="DURATION",
    default="15s",
    show_default=True,
    help="Longest gap between two rounds (at most half the lease); due tasks wake it sooner.",
)
@json_option
@pass_state
def scheduler(state: State, *, lease: str, interval: str, as_json: bool) -> None:
    """Run the scheduler role alone: elect one leader across the fleet and fire the app's cron tasks.

    `workhorse worker` already runs this role unless given --no-scheduler; use this command for
    a dedicated scheduler process. SIGTERM or SIGINT finishes the round in flight, then releases
    the lease so a standby takes over at once. Logs go to stderr.

    \b
    Examples:
      workhorse --app myproject.jobs:app scheduler
      workhorse --app myproject.jobs:app scheduler --lease 60s --interval 20s
    """
    app = state.app(required=True)
    if not app.tasks:
        raise ConfigurationError(
            code="SCHEDULER_NO_TASKS",
            cause=f"the app {state.app_spec!r} declares no cron task, so a scheduler would have nothing to fire",
            fix="declare one with @app.task(cron='*/5 * * * *', tenant='none'), or point --app at the app that does",
        )
    runner = Scheduler(app, lease=_duration(lease), interval=_duration(interval))
    with _logging_to_stderr(logging.INFO, "text"):
        logging.getLogger("workhorse.cli").info(
            "workhorse scheduler %s: app %s, database %s, schema %s",
            runner.id,
            state.app_spec,
            redact(app.database_url),
            app.schema,
        )
        stats = run_role(app, lambda _app: runner.run())
    if as_json:
        emit_json(stats.as_dict())


@click.command("tasks")
@json_option
@pass_state
def tasks(state: State, *, as_json: bool) -> None:
    """List every cron task: its schedule, last fire, next fire, and the scheduler's leader.

    Reads what the leader recorded in the database. With --app, tasks the app declares that no
    leader has registered yet are listed too (registered: false).

    \b
    Examples:
      workhorse tasks
      workhorse --app myproject.jobs:app tasks --json
    """
    given = state.app_spec is not None
    report: TasksReport = run_with_app(state.app(), lambda app: app.admin.tasks(declared=given))
    if as_json:
        emit_json(report.to_dict())
        return
    console = stdout()
    now = report.db_now
    if not report.tasks:
        console.print(
            "no tasks yet" + ("" if given else " (pass --app to include tasks declared but not yet registered)")
        )
    else:
        names = []
        for t in report.tasks:
            if t.declared is False:
                names.append(Text.assemble(t.name, (" (not in this app)", "yellow")))
            elif not t.registered:
                names.append(Text.assemble(t.name, (" (not registered yet)", "yellow")))
            else:
                names.append(styled(t.name))
        # Times on two lines (the instant, then how long ago or until), never broken mid-token.
        table, hidden = fit(
            [
                Column("name", names, key=True),
                Column("schedule", [t.schedule for t in report.tasks], key=True),
                Column("catch-up", [t.catch_up for t in report.tasks], priority=3),
                Column("last fire", [_when(t.last_occurrence, now) for t in report.tasks], priority=1),
                Column("next fire", [_when(t.next_at, now) for t in report.tasks], key=True),
                Column("fired", [str(t.fired) for t in report.tasks], priority=2, justify="right"),
            ],
            console.width,
        )
        console.print(table)
        if (note := hidden_note(hidden, console.width)) is not None:
            console.print(note)
    leader = report.leader
    if leader is None:
        console.print("leader: none yet (run `workhorse worker` or `workhorse scheduler` with --app)")
    elif leader.live:
        where = f"{leader.host} pid {leader.pid}" if leader.host else "unknown host"
        console.print(
            f"leader: {leader.holder} on {where}, epoch {leader.epoch}, renewed {ago(leader.renewed_at, now)}, "
            f"lease ends {ago(leader.expires_at, now)}"
        )
    else:
        console.print(
            f"leader: none live (the last, {leader.holder} epoch {leader.epoch}, let its lease end "
            f"{ago(leader.expires_at, now)})"
        )


def _when(value: datetime | None, now: datetime) -> str:
    return "-" if value is None else f"{iso(value)}\n{ago(value, now)}"
