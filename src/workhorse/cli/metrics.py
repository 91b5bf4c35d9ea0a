"""``metrics``: the Prometheus exposition of ``app.admin.snapshot()``, printed once or served.

Printed once (a cron job writing node_exporter's textfile directory, a quick look), a database
that cannot be read is a refusal like any command's. Served (``--serve``), a failed scrape answers
``workhorse_up 0`` and the server keeps running; see ``workhorse.metrics`` and docs/operations.md.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from types import FrameType

import click

from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import emit_json
from workhorse.durations import to_seconds
from workhorse.errors import ConfigurationError
from workhorse.logs import visible
from workhorse.metrics import DEFAULT_TIMEOUT, families, render, serve, to_document

ADDRESS_FIX = "workhorse metrics --serve :9464   # or --serve 127.0.0.1:9464, --serve [::1]:9464"
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]\s]*)):(?P<port>\d{1,5})$")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (every IPv4 interface) → (host, port)."""
    found = _ADDRESS.match(text.strip())
    port = int(found["port"]) if found else -1
    if found is None or not 0 <= port <= 65535:
        raise ConfigurationError(
            code="METRICS_ADDRESS_INVALID",
            cause=f"--serve expected HOST:PORT, [IPV6]:PORT or :PORT with a port from 0 to 65535, got {text!r}",
            fix=ADDRESS_FIX,
        )
    host = found["v6"] or found["host"] or "0.0.0.0"  # noqa: S104 - `:PORT` asks for every interface
    return host, port


@click.command("metrics")
@click.option(
    "--serve",
    "address",
    metavar="[HOST]:PORT",
    help="Serve the metrics over HTTP on this address until SIGINT/SIGTERM, instead of printing them once. "
    ":PORT listens on every IPv4 interface; port 0 picks a free one.",
)
@click.option(
    "--timeout",
    "timeout",
    metavar="DURATION",
    default=f"{DEFAULT_TIMEOUT:g}s",
    show_default=True,
    help="With --serve: a scrape slower than this answers workhorse_up 0. Keep it below Prometheus' scrape_timeout.",
)
@json_option
@pass_state
def metrics(state: State, *, address: str | None, timeout: str, as_json: bool) -> None:
    """Print the Prometheus metrics of the queue once, or serve them with --serve.

    Every number is read from the database (jobs by state, the oldest ready job's age, dead jobs,
    paused queues, live workers and the all-time outcome counters), so one endpoint reports the
    whole fleet. With --json, the same samples as one JSON document.

    \b
    Examples:
      workhorse metrics
      workhorse metrics --json
      workhorse metrics --serve :9464
      workhorse metrics --serve 127.0.0.1:9464 --timeout 3s
    """
    if address is not None:
        host, port = parse_address(address)
        seconds = to_seconds(timeout, what="--timeout", allow_zero=False)
        _serve(state, host, port, seconds, as_json=as_json)
        return
    app = state.app()
    started = time.perf_counter()
    snapshot = run_with_app(app, lambda a: a.admin.snapshot(None))
    found = families(snapshot, time.perf_counter() - started)
    if as_json:
        emit_json(to_document(found))
    else:
        click.echo(visible(render(found)), nl=False)  # a label from the database shows its controls


def _serve(state: State, host: str, port: int, timeout: float, *, as_json: bool) -> None:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    server = serve(state.app(), host, port, timeout=timeout)
    try:
        if as_json:
            emit_json({"serving": server.url, "host": server.host, "port": server.port})
        else:
            click.echo(f"serving workhorse metrics on {server.url} (Ctrl-C to stop)", err=True)
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop.wait(1.0):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        server.close()
    if not as_json:
        click.echo("stopped", err=True)
