"""The fleet: ``workers`` lists the live worker processes from the registry."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from workhorse.cli.columns import Column, fit, hidden_note
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, stdout
from workhorse.types import WorkerInfo


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
    queues = [", ".join(f"{q}({w.concurrency.get(q, '?')})" for q in w.queues) for w in live]
    table, hidden = fit(
        [
            Column("id", [w.id for w in live], key=True),
            Column("host", [w.host for w in live], priority=1, shrinks=12),
            Column("pid", [str(w.pid) for w in live], key=True, justify="right"),
            Column("queues", queues, priority=2, shrinks=12),
            Column("started", [ago(w.started_at, now) for w in live], priority=4),
            Column("last seen", [ago(w.last_seen_at, now) for w in live], priority=3),
        ],
        console.width,
    )
    console.print(table)
    if (note := hidden_note(hidden, console.width)) is not None:
        console.print(note)
