"""``dashboard``: serve the web dashboard (``workhorse.dashboard``) with uvicorn until stopped.

Design: docs/reference/cli.md
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator

import click

from workhorse.cli.main import State, json_option, pass_state
from workhorse.cli.output import emit_json
from workhorse.errors import ConfigurationError

DEFAULT_BIND = "127.0.0.1:8000"
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]\s]+)):(?P<port>\d{1,5})$")


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPV6]:PORT`` → (host, port)."""
    found = _ADDRESS.match(text.strip())
    port = int(found["port"]) if found else -1
    if found is None or not 0 <= port <= 65535:
        raise ConfigurationError(
            code="DASHBOARD_ADDRESS_INVALID",
            cause=f"--bind expected HOST:PORT or [IPV6]:PORT with a port from 0 to 65535, got {text!r}",
            fix="workhorse dashboard --bind 127.0.0.1:8000",
        )
    return found["v6"] or found["host"], port


@click.command("dashboard")
@click.option("--bind", "bind", metavar="HOST:PORT", default=DEFAULT_BIND, show_default=True, help="Where to listen.")
@click.option(
    "--token",
    "token",
    metavar="TOKEN",
    envvar="WORKHORSE_DASHBOARD_TOKEN",
    help="Ask every request for this token (Authorization: Bearer, or ?token= once). "
    "Required on any address but loopback; without it only loopback host names "
    "(http://127.0.0.1:PORT, localhost) are served. Default: $WORKHORSE_DASHBOARD_TOKEN.",
)
@click.option("--read-only", "read_only", is_flag=True, help="Show the queue; hide and refuse every action.")
@click.option(
    "--refresh", "refresh", type=float, default=5.0, show_default=True, help="Seconds between overview refreshes."
)
@json_option
@pass_state
def dashboard(state: State, *, bind: str, token: str | None, read_only: bool, refresh: float, as_json: bool) -> None:
    """Serve the web dashboard: queues, jobs, workers and tasks, with the operator's actions.

    \b
    Examples:
      workhorse --app myproject.jobs:app dashboard
      workhorse dashboard --bind 0.0.0.0:8000 --token "$(openssl rand -hex 16)"
      workhorse dashboard --read-only
    """
    from workhorse.dashboard import make_asgi_app, require_extra
    from workhorse.dashboard.security import check_bind, check_token

    require_extra(server=True)
    host, port = parse_bind(bind)
    token = check_token(token or None)
    check_bind(host, token)
    app = state.app()
    asgi = make_asgi_app(app, token=token, read_only=read_only, refresh_seconds=refresh)

    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    if as_json:
        emit_json({"serving": f"http://{shown}:{port}/", "read_only": read_only, "token": token is not None})
    else:
        click.echo(f"serving the workhorse dashboard on http://{shown}:{port}/ (Ctrl-C to stop)", err=True)

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """SIGINT/SIGTERM stop the server gracefully and the command then exits 0 ("stopped"):
            uvicorn's own handling would raise the signal again once stopped."""
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(asgi, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    Server(config).run()
    if not as_json:
        click.echo("stopped", err=True)
