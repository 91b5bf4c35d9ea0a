"""``workhorse demo``: a short self-contained tour on the embedded database."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

import click

from workhorse import embedded
from workhorse.cli.main import State, pass_state


@click.command("demo", short_help="A short live demonstration on the embedded database.")
@pass_state
@click.pass_context
def demo(ctx: click.Context, state: State) -> None:
    """Watch a real queue retry, dead-letter, dedupe and delay jobs, in about five seconds.

    Runs in a schema of its own, workhorse_demo (or --schema), made afresh and kept afterwards so
    `workhorse --schema workhorse_demo ls --state dead` shows its jobs. Uses the embedded database
    (creating it on first use) unless --database-url or WORKHORSE_DATABASE_URL names one.

    \b
    Example:
      workhorse demo
    """
    # Imported here: the demo pulls in its own jobs and display, which no other command needs.
    module = importlib.import_module("workhorse.demo")
    run = cast(Callable[..., int], module.main)
    with embedded.creation(allowed=True):  # a first run makes the embedded database
        code = run(state.database_url, schema=state.schema)
    ctx.exit(code)
