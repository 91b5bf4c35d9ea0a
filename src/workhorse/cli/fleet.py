"""The fleet: ``workers`` lists the live worker processes from the registry."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.table import Table

from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, stdout
from workhorse.drivers.base import WorkerInfo


@click.command("workers")
@json_option
@pass_state
def workers(state: State, *, as_json: bool) -> None:
    """List the live worker processes: id, host, pid, queues, concurrency, started, last seen.

    A worker's row is renewed with its heartbeat and expires after its visibility timeout, so a
    killed worker drops off this list on its own.

    \b
    Examples:
      workhorse workers
      workhorse workers --json
    """
    live: list[WorkerInfo] = run_with_app(state.app(), lambda app: app.list_workers())
    if as_json:
        emit_json({"workers": [w.to_dict() for w in live]})
        return
    console = stdout()
    if not live:
        console.print("no live workers")
        return
    now = datetime.now(UTC)  # clock-ok: relative times for display only
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "host", "pid", "queues", "started", "last seen"):
        table.add_column(column, no_wrap=column in ("id", "pid"), overflow="fold")
    for w in live:
        queues = ", ".join(f"{q}({w.concurrency.get(q, '?')})" for q in w.queues)
        table.add_row(w.id, w.host, str(w.pid), queues, ago(w.started_at, now), ago(w.last_seen_at, now))
    console.print(table)
