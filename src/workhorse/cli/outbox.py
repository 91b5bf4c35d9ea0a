"""``outbox migrate`` installs the staging table in a source database; ``relay`` moves what the
sources staged into the queue until SIGTERM (``workhorse.outbox``, ``workhorse.relay``)."""

from __future__ import annotations

import logging

import click

from workhorse.cli.main import FAILED, Refusal, State, json_option, pass_state, run_role
from workhorse.cli.output import emit_json, stdout
from workhorse.cli.run import _logging_to_stderr
from workhorse.durations import to_seconds
from workhorse.errors import DatabaseError
from workhorse.logs import LOG_FORMATS, LogFormat
from workhorse.outbox import Outbox
from workhorse.outbox.relay import Relay, redact

SOURCE_HELP = "A source database's URL (the database your transactions stage jobs in). Repeat for several."


@click.group("outbox")
def outbox() -> None:
    """The transactional outbox: jobs staged in your own database's transactions.

    \b
    Examples:
      workhorse outbox migrate --source postgresql://app-db/app
      workhorse relay --source postgresql://app-db/app
    """


@outbox.command("migrate")
@click.option("--source", "sources", metavar="URL", multiple=True, required=True, help=SOURCE_HELP)
@json_option
@pass_state
def migrate(state: State, *, sources: tuple[str, ...], as_json: bool) -> None:
    """Install or upgrade the staging table (SCHEMA.outbox) in each source database. Safe to run
    again and from many processes at once. The schema is the app's (--schema, or --app's).

    \b
    Examples:
      workhorse outbox migrate --source postgresql://app-db/app
      workhorse --schema jobs outbox migrate --source "$APP_DATABASE_URL" --json
    """
    box = Outbox(state.app())
    applied = {redact(url): box.migrate_source(url, shown=redact(url)) for url in sources}
    if as_json:
        emit_json({"schema": box.schema, "sources": [{"source": s, "applied": a} for s, a in applied.items()]})
        return
    for shown, versions in applied.items():
        done = ", ".join(str(v) for v in versions)
        stdout().print(
            f"{shown}: applied outbox migration {done} to schema {box.schema}"
            if versions
            else f"{shown}: the staging table {box.schema}.outbox is up to date"
        )


@click.command("relay")
@click.option("--source", "sources", metavar="URL", multiple=True, required=True, help=SOURCE_HELP)
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000), help="Rows moved per claim.")
@click.option(
    "--lease",
    metavar="DURATION",
    default="30s",
    show_default=True,
    help="How long a claimed batch is this relay's; a killed relay's rows come back after it.",
)
@click.option(
    "--poll-interval",
    metavar="DURATION",
    default="15s",
    show_default=True,
    help="Between claims when no NOTIFY wakes the relay.",
)
@click.option(
    "--retention",
    metavar="DURATION|none",
    default="7d",
    show_default=True,
    help="How long published rows are kept in the source as the audit trail ('none': forever).",
)
@click.option("--burst", is_flag=True, help="Move what is pending in every source, then exit.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True)
@json_option
@pass_state
def relay(
    state: State,
    *,
    sources: tuple[str, ...],
    batch: int,
    lease: str,
    poll_interval: str,
    retention: str,
    burst: bool,
    log_level: str,
    log_format: LogFormat,
    as_json: bool,
) -> None:
    """Move the jobs staged in each source database into the queue, each exactly once, until
    SIGTERM or SIGINT (the batch in flight finishes first), then exit 0. --json prints what it
    moved at exit. Refused (exit 2) when a source has no staging table; exits 1 when a source or
    the queue cannot be reached at start.

    \b
    Examples:
      workhorse relay --source postgresql://app-db/app
      workhorse relay --source "$ORDERS_DB" --source "$BILLING_DB" --batch 1000
    """
    app = state.app()
    runner = Relay(
        app,
        list(sources),
        batch=batch,
        lease=to_seconds(lease, what="--lease", allow_zero=False),
        poll_interval=to_seconds(poll_interval, what="--poll-interval", allow_zero=False),
        retention=None if retention.strip().lower() == "none" else to_seconds(retention, what="--retention"),
    )
    try:
        runner.check_sources()
    except DatabaseError as error:
        raise Refusal(error, FAILED) from error
    with _logging_to_stderr(getattr(logging, log_level.upper()), log_format):
        logging.getLogger("workhorse.cli").info(
            "workhorse relay %s: %d source(s) into schema %s%s",
            runner.id,
            len(sources),
            app.schema,
            " (burst)" if burst else "",
        )
        stats = run_role(app, lambda _app: runner.run(burst=burst))
    if as_json:
        emit_json(stats.to_dict())


COMMANDS = (outbox, relay)
