"""``purge``: the retention policy's purge, now (the scheduler leader runs it on its own cadence)."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import emit_json, stdout
from workhorse.retention.policy import PurgeReport


@click.command("purge", short_help="Remove what the retention policy says has aged out, now.")
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@json_option
@pass_state
def purge(state: State, *, dry_run: bool, as_json: bool) -> None:
    """Remove, now, what the app's retention policy says has aged out: finished jobs by state
    (with their steps), expired events, gone workers' registry rows, old rate stamps, day
    counters and the webhooks delivery ledger's old rows. Live jobs are never removed. Small
    batches, each its own transaction: it is safe beside running workers and beside the
    leader's own purge (each row goes once).

    The policy is the app's (`App(retention=Retention(...))`, loaded with --app); without --app,
    the default policy. A dry run prints the same document as a real one.

    \b
    Examples:
      workhorse --app myproject.jobs:app purge --dry-run
      workhorse --app myproject.jobs:app purge --json
    """
    report: PurgeReport = run_with_app(state.app(), lambda app: app.admin.purge(dry_run=dry_run))
    if as_json:
        emit_json(report.to_dict())
        return
    document = report.to_dict()["removed"]
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("target", no_wrap=True)
    table.add_column("would remove" if dry_run else "removed", justify="right", no_wrap=True)
    for state_name, n in document["jobs"].items():
        table.add_row(f"jobs {state_name}", f"{n:,}")
    for target in ("steps", "events", "workers", "flow_starts", "counters", "webhook_deliveries"):
        table.add_row(target.replace("_", " "), f"{document[target]:,}")
    console = stdout()
    console.print(table)
    if dry_run:
        console.print(Text("dry run: nothing was removed", style="dim"))


COMMANDS = (purge,)
