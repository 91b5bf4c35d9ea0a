"""``export``: one tenant's jobs written to a directory, one JSON file a page
(``DIR/page-000001.json``, ...), through ``app.admin.export``."""

from __future__ import annotations

import click
from rich.text import Text

from workhorse.app import App
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import count, emit_json, stdout
from workhorse.export import DEFAULT_EXPORT_PAGE, MAX_EXPORT_PAGE, ExportSummary, write_export
from workhorse.logs import visible
from workhorse.types import ALL_STATES


@click.command("export", short_help="Write one tenant's jobs to a directory, a JSON file a page.")
@click.option("--tenant", required=True, metavar="TENANT", help="The tenant whose jobs to export (exactly this id).")
@click.option("--state", "state_filter", metavar="STATE", help=f"Only jobs in this state: {', '.join(ALL_STATES)}.")
@click.option(
    "--out",
    required=True,
    metavar="DIR",
    help="The directory to write; created when missing, refused when it holds anything.",
)
@click.option(
    "--page-size",
    type=int,
    default=DEFAULT_EXPORT_PAGE,
    show_default=True,
    metavar="N",
    help=f"Jobs per page file, 1 to {MAX_EXPORT_PAGE}.",
)
@json_option
@pass_state
def export(state: State, *, tenant: str, state_filter: str | None, out: str, page_size: int, as_json: bool) -> None:
    """Write every job of one tenant to DIR, one JSON document a page, newest first:
    DIR/page-000001.json, page-000002.json, ... each {"tenant", "state", "page", "jobs",
    "next"} (jobs as `ls --json` prints them, without steps; `next` is null on the last page).

    Only jobs whose tenant is exactly TENANT are read. Each page is its own statement, not one
    snapshot: a job enqueued meanwhile is not exported, none is written twice. DIR must be
    missing or empty. With --json, prints {"tenant", "pages", "jobs", "out"}.

    \b
    Examples:
      workhorse export --tenant acme --out ./acme-export
      workhorse export --tenant acme --state dead --out ./acme-dead --page-size 200 --json
    """

    async def work(app: App) -> ExportSummary:
        pages = app.admin.export(tenant=tenant, state=state_filter, page_size=page_size)  # checked here
        return await write_export(pages, out)

    summary: ExportSummary = run_with_app(state.app(), work)
    if as_json:
        emit_json(summary.to_dict())
        return
    what = f"{count(summary.jobs, 'job')}" + ("" if state_filter is None else f" in state {state_filter}")
    console = stdout()
    # soft_wrap: the tenant and the directory print whole, never broken at the terminal width
    console.print(
        Text.assemble(("exported", "bold green"), visible(f" {what} of tenant {summary.tenant}")), soft_wrap=True
    )
    console.print(f"{count(summary.pages, 'page')} in {summary.out}", soft_wrap=True)


COMMANDS: list[click.Command] = [export]
