"""Queues as a whole: ``pause`` and ``resume`` a queue, and ``stats`` per queue and per job name."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.table import Table
from rich.text import Text

from workhorse.admin import DEFAULT_WINDOW, Stats, StatsRow
from workhorse.app import App
from workhorse.cli.columns import Column, fit, hidden_note
from workhorse.cli.jobs import CAPS_UNKNOWN, command_line
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, percent, span, stdout, styled
from workhorse.health.report import HealthReport
from workhorse.logs import visible
from workhorse.types import QueuePause

HIGH_FAILURE_RATE = 0.1  # a failure rate at or above this share is printed red; below it, yellow


@click.command("pause", short_help="Pause a queue: workers claim nothing from it.")
@click.argument("queue", metavar="QUEUE")
@click.option("--reason", metavar="TEXT", help="Why, for whoever looks next (shown by `workhorse stats`).")
@json_option
@pass_state
def pause(state: State, queue: str, *, reason: str | None, as_json: bool) -> None:
    """Pause a queue: no worker claims a job from it until `workhorse resume QUEUE`.

    Jobs already running finish; enqueueing goes on, and the jobs wait. Pausing a paused queue
    keeps when it was first paused (and replaces the reason only when a new one is given).

    \b
    Examples:
      workhorse pause emails --reason "provider outage"
      workhorse pause emails --json
    """
    paused: QueuePause = run_with_app(state.app(), lambda app: app.admin.pause(queue, reason=reason))
    if as_json:
        emit_json(paused.to_dict())
        return
    console = stdout()
    since = ago(paused.paused_at, datetime.now(UTC))  # clock-ok: relative time for display only
    why = "" if paused.reason is None else f" ({paused.reason})"
    console.print(Text.assemble(("paused", "bold yellow"), visible(f" queue {paused.queue} since {since}{why}")))
    console.print(styled(f"no worker claims from it until: {command_line(state, 'resume', paused.queue)}", "dim"))


@click.command("resume", short_help="Resume a paused queue.")
@click.argument("queue", metavar="QUEUE")
@json_option
@pass_state
def resume(state: State, queue: str, *, as_json: bool) -> None:
    """Resume a paused queue: idle workers wake and claim from it at once.

    Resuming a queue that is not paused changes nothing (and says so); with --json, prints
    {"queue": QUEUE, "resumed": true|false}.

    \b
    Examples:
      workhorse resume emails
      workhorse resume emails --json
    """
    resumed: bool = run_with_app(state.app(), lambda app: app.admin.resume(queue))
    if as_json:
        emit_json({"queue": queue, "resumed": resumed})
        return
    if resumed:
        stdout().print(Text.assemble(("resumed", "bold green"), visible(f" queue {queue}")))
    else:
        stdout().print(f"queue {queue} was not paused; nothing changed")


@click.command("stats", short_help="Per queue and job name: states, oldest wait, throughput, failures.")
@click.option(
    "--since",
    metavar="DURATION",
    default=DEFAULT_WINDOW,
    show_default=True,
    help="The window throughput and failure rate are measured over: 15m, 1h, 1d...",
)
@json_option
@pass_state
def stats(state: State, *, since: str, as_json: bool) -> None:
    """Show each queue and each job name: jobs by state, how long the oldest ready job has
    waited, throughput (completed a minute) and failure rate over a window, and paused queues.
    Running jobs whose lease lapsed (their worker died or froze, and nothing recovered them yet)
    are counted apart, under `lease lapsed`, with how long ago the oldest lapsed.

    The failure rate is the share of attempts settled in the window that did not complete (a
    retry counts). Counts of done and cancelled jobs are history and are not listed; they show
    as throughput.

    Under them, in red, what is wrong with the database as the queue feels it: a transaction
    holding the vacuum horizon (VACUUM_HORIZON_PINNED), a table full of dead rows nothing
    vacuums (DEAD_ROWS_HIGH), each with the SQL that fixes it. --json adds them under
    "database" (null on the memory driver).

    \b
    Examples:
      workhorse stats
      workhorse stats --since 15m
      workhorse stats --since 1d --json
    """
    report, health = run_with_app(state.app(), lambda app: _stats_and_health(app, since))
    caps_known = state.app_spec is not None  # caps are declared on the App: without it, unknown
    if as_json:
        document = report.to_dict()
        document["database"] = None if health is None else health.to_dict()
        if not caps_known:
            for row in document["queues"]:
                row["held_back"] = None
        emit_json(document)
        return
    console = stdout()
    window = _window(report.window)
    live = f"{report.workers:,} live worker{'' if report.workers == 1 else 's'}"
    console.print(Text(f"over the last {window} · {live}", style="bold"))
    if not report.queues:
        console.print(f"no queued, running or failed jobs, and nothing settled in the last {window}")
    else:
        for rows, by_name in ((report.queues, False), (report.names, True)):
            if not rows:  # a paused queue with no jobs has a row of its own and no names
                continue
            if by_name:
                console.print()
            table, hidden = stats_table(rows, by_name=by_name, caps_known=caps_known)
            console.print(table)
            if (note := hidden_note(hidden, console.width)) is not None:
                console.print(note)
        if not caps_known:
            console.print(Text(f"held by caps: {CAPS_UNKNOWN}", style="dim"))
    if report.paused:
        console.print()
        console.print(paused_table(report.paused, report.at))
    if health is not None and health.warnings:
        console.print()
        console.print(Text("database", style="bold"))
        for warning in health.warnings:
            console.print(Text.assemble((warning.code, "bold red"), visible(f" {warning.cause}")))
            console.print(Text.assemble(("  fix: ", "dim"), visible(warning.fix)))


async def _stats_and_health(app: App, since: str) -> tuple[Stats, HealthReport | None]:
    """``stats`` and the database's health (dead rows, a pinned vacuum horizon), on one loop."""
    return await app.admin.stats(since), await app.admin.health()


def stats_table(rows: list[StatsRow], *, by_name: bool, caps_known: bool = True) -> tuple[Table, list[str]]:
    """One row per queue (or per job name of a queue): jobs in each state now, how long the oldest
    ready job has waited, then what settled in the window (completed a minute, jobs completed,
    the share of attempts that failed), fitted to the terminal (``cli.columns``): the counts
    always, the window's figures as they fit. Answers the table and the headers left out."""
    key = not by_name  # a queue's row is what an operator reads first: at 80 columns it keeps all
    columns = [Column("queue", [row.queue for row in rows], key=True)]
    if by_name:
        names = [
            Text.assemble(visible(row.name or ""), (" (unknown)", "yellow")) if row.unknown else (row.name or "")
            for row in rows
        ]
        columns.append(Column("name", names, key=True))
    for header in ("ready", "running", "delayed", "suspended", "dead", "failed"):
        style = {"dead": "bold red", "failed": "red"}.get(header, "")
        cells = [_number(getattr(row, header), style) for row in rows]
        # per name, beside a long module-qualified name, delayed and suspended may yield (and say so)
        whole = key or header not in ("delayed", "suspended")
        columns.append(Column(header, cells, key=whole, justify="right"))
        if header == "running" and any(row.lease_lapsed for row in rows):
            # Running jobs whose lease lapsed are not counted as running: a column of their own,
            # shown only while there are some, with how long ago the oldest lapsed.
            columns.append(Column("lease lapsed", [_lapsed(row) for row in rows], key=True, justify="right"))
    oldest = ["-" if row.oldest_ready_age is None else span(row.oldest_ready_age) for row in rows]
    columns.append(Column("oldest ready", oldest, key=key, priority=1, justify="right", compact="oldest\nready"))
    per_minute = [_throughput(row.throughput) for row in rows]
    columns.append(Column("done/min", per_minute, key=key, priority=2, justify="right", compact="done\n/min"))
    rates = [_rate(row.failure_rate) for row in rows]
    columns.append(Column("failure rate", rates, priority=3, justify="right", compact="failure\nrate"))
    completed = [_number(row.completed, "green") for row in rows]  # in the window, as the rates
    columns.append(Column("completed", completed, priority=4, justify="right"))
    if not by_name and caps_known and any(row.held_back for row in rows):
        held = [_number(row.held_back, "yellow") for row in rows]
        columns.append(Column("held by caps", held, key=True, justify="right", compact="held by\ncaps"))
    if not by_name and any(row.paused for row in rows):  # also listed whole under "paused queues"
        marks = [Text("paused", style="bold yellow") if row.paused else Text("") for row in rows]
        columns.append(Column("", marks, priority=0))
    return fit(columns, stdout().width)


def paused_table(pauses: list[QueuePause], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, title="paused queues", title_justify="left")
    table.add_column("queue", overflow="fold")
    table.add_column("since", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for p in pauses:
        table.add_row(Text(p.queue, style="yellow"), ago(p.paused_at, now), p.reason or Text("-", style="dim"))
    return table


def _window(seconds: float) -> str:
    """The window whole, unlike ``span``: ``1h30m``, ``90s``, ``1.5s``."""
    if seconds < 60 or seconds != int(seconds):
        return f"{seconds:g}s"
    parts, rest = [], int(seconds)
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def _throughput(per_minute: float) -> Text:
    """Completed jobs a minute: two decimals while small, so a trickle never reads as 0."""
    if per_minute == 0:
        return Text("0", style="dim")
    if per_minute < 0.01:
        return Text("<0.01")
    return Text(f"{per_minute:,.2f}" if per_minute < 100 else f"{per_minute:,.0f}")


def _lapsed(row: StatsRow) -> Text:
    """Running jobs whose lease lapsed, and how long ago the oldest did (``3, 45s ago``)."""
    if not row.lease_lapsed:
        return Text("0", style="dim")
    since = "" if row.oldest_lapse_age is None else f", {span(row.oldest_lapse_age)} ago"
    return Text(f"{row.lease_lapsed:,}{since}", style="bold red")


def _number(value: int, style: str = "") -> Text:
    return Text(f"{value:,}", style=style if value else "dim")


def _rate(share: float | None) -> Text:
    if share is None:
        return Text("-", style="dim")
    style = "red" if share >= HIGH_FAILURE_RATE else "yellow" if share > 0 else "green"
    return Text(percent(share), style=style)


COMMANDS: list[click.Command] = [pause, resume, stats]
