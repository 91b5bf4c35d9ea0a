"""``workhorse db``: the embedded PostgreSQL that workhorse runs for development and tests."""

from __future__ import annotations

import click
from rich.table import Table

from workhorse import embedded
from workhorse.cli.main import State, json_option, pass_state
from workhorse.cli.output import emit_json, stderr, stdout, styled


@click.group("db", short_help="Start, stop or locate the embedded PostgreSQL.")
@click.pass_context
def db(ctx: click.Context) -> None:
    """Manage the embedded PostgreSQL under the project's .workhorse (the nearest one in the
    current directory or above it, as git finds .git; or WORKHORSE_HOME).

    The embedded server is what workhorse uses when neither --database-url nor
    WORKHORSE_DATABASE_URL names a database. It is for development and tests: it runs with
    fsync off. `db url` reports whichever database the command line would use.

    Every `db` command first stops orphans: servers whose data root keeps away from a home
    that no longer exists (a deleted clone); `db status` lists them and how to remove their data.
    """
    found = embedded.stop_orphans()
    ctx.ensure_object(State).orphans = found
    for orphan in found:  # on stderr: a --json document on stdout stays the only thing there
        if orphan["stopped"]:
            line = (
                f"workhorse: stopped the embedded PostgreSQL of {orphan['home']}, which no longer exists "
                f"(its data is kept in {orphan['data']}; to delete it: {orphan['remove']})"
            )
            stderr().print(styled(line, "yellow"))


@db.command("start", short_help="Start the embedded server; print its URL.")
@json_option
def start(as_json: bool) -> None:
    """Start the embedded server (initialising it on first use) and print its URL.

    \b
    Example:
      export WORKHORSE_DATABASE_URL=$(workhorse db start)
    """
    with embedded.creation(allowed=True):  # the one `db` command that makes a database
        url = embedded.ensure_started()
    if as_json:
        emit_json({"url": url, "home": str(embedded.home_dir())})
    else:
        click.echo(url)


@db.command("stop", short_help="Stop the embedded server (data kept).")
@json_option
def stop(as_json: bool) -> None:
    """Stop the embedded server; its data is kept for the next start.

    \b
    Example:
      workhorse db stop
    """
    stopped = embedded.stop()
    home = embedded.home_dir()
    if as_json:
        emit_json({"stopped": stopped, "home": str(home)})
    else:
        click.echo(f"stopped the server in {home}" if stopped else f"no server was running in {home}")


@db.command("url", short_help="Print the database URL in use.")
@json_option
@pass_state
def url(state: State, as_json: bool) -> None:
    """Print the database URL the command line uses (starting the embedded server if that is the one).

    \b
    Example:
      psql "$(workhorse db url)"
    """
    resolved = state.app().database_url
    if as_json:
        emit_json({"url": resolved})
    else:
        click.echo(resolved)


@db.command("status", short_help="Where the embedded server lives; whether it runs.")
@json_option
@pass_state
def status(state: State, as_json: bool) -> None:
    """Show where the embedded server lives, whether it runs, and its URL; and the orphans: the
    servers of removed homes, which this command (as every `db` command) has just stopped.

    \b
    Example:
      workhorse db status --json
    """
    info = embedded.status()
    orphans = state.orphans
    if as_json:
        emit_json({**info, "orphans": orphans})
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in info.items():
        shown = (styled("yes", "green") if value else styled("no", "dim")) if key == "running" else styled(value or "-")
        grid.add_row(key, shown)
    for orphan in orphans:
        how = "stopped it just now" if orphan["stopped"] else "running: stop failed" if orphan["running"] else "stopped"
        line = f"{orphan['home']} is gone; its server: {how}; its data: {orphan['data']} (delete: {orphan['remove']})"
        grid.add_row("orphan", styled(line, "yellow"))
    stdout().print(grid)
    if orphans:
        note = (
            "orphans are servers kept in /var/lib/workhorse for a home that no longer exists; every "
            "`workhorse db` command stops them (data kept)"
        )
        stdout().print(styled(note, "dim"))
