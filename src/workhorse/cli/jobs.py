"""Inspecting and operating on jobs: ``ls``, ``show`` and the verbs ``cancel``, ``requeue``, ``promote``, ``rm``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workhorse.app import DEFAULT_PAGE, MAX_PAGE, App
from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, state_text, stdout, trim
from workhorse.drivers.base import ALL_STATES, FINISHED_STATES, Job, Page
from workhorse.errors import JobNotFoundError

ERROR_WIDTH = 48


@click.command("ls")
@click.option("--state", metavar="STATE", help=f"Only jobs in this state: {', '.join(ALL_STATES)}.")
@click.option("--queue", metavar="QUEUE", help="Only jobs on this queue.")
@click.option("--name", metavar="NAME", help="Only jobs of this name (module.function unless named).")
@click.option("--tenant", metavar="TENANT", help="Only this tenant's jobs.")
@click.option(
    "--limit",
    type=int,
    default=DEFAULT_PAGE,
    show_default=True,
    metavar="N",
    help=f"Jobs per page, 1 to {MAX_PAGE}.",
)
@click.option("--after", metavar="CURSOR", help="Continue from a previous page's `next` cursor.")
@json_option
@pass_state
def list_jobs(
    state: State,
    state_filter: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    tenant: str | None = None,
    limit: int = DEFAULT_PAGE,
    after: str | None = None,
    as_json: bool = False,
    **_: Any,
) -> None:
    """List jobs, newest first, one page at a time.

    \b
    Examples:
      workhorse ls --state dead
      workhorse ls --queue emails --limit 20 --json
      workhorse ls --after 0190f1c2-...        # the next page
    """


# click names the parameter after the option (`state`), which is also what the State object is
# called; rebuild the command with the option renamed so both can be passed.
def _ls(
    state: State,
    state_filter: str | None,
    queue: str | None,
    name: str | None,
    tenant: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    page: Page = run_with_app(
        state.app(),
        lambda app: app.list_jobs(
            state=state_filter, queue=queue, name=name, tenant=tenant, limit=limit, after=after
        ),
    )
    if as_json:
        emit_json({"jobs": [job.to_dict(with_steps=False) for job in page.jobs], "next": page.next})
        return
    console = stdout()
    if not page.jobs:
        console.print("no jobs" + (" match" if any((state_filter, queue, name, tenant, after)) else " yet"))
        return
    console.print(jobs_table(page.jobs))
    if page.next is not None:
        words = ["workhorse", "ls"]
        for flag, value in (("--state", state_filter), ("--queue", queue), ("--name", name), ("--tenant", tenant)):
            if value is not None:
                words += [flag, value]
        if limit != DEFAULT_PAGE:
            words += ["--limit", str(limit)]
        words += ["--after", page.next]
        console.print(Text(f"next page: {shlex.join(words)}", style="dim"))
