"""``workhorse.dashboard``: the web dashboard, an ASGI app over ``app.admin``.
Modules: ``security``, ``web``, ``actions``, ``views``, ``charts``; its packages (the
``workhorse[dashboard]`` extra) are imported only when a dashboard is made.

Design: docs/guides/dashboard.md
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from workhorse.errors import ConfigurationError

if TYPE_CHECKING:
    from workhorse.app import App

ENV_TOKEN = "WORKHORSE_DASHBOARD_TOKEN"  # noqa: S105 - the variable's name, not a token
EXTRA_MODULES = ("starlette", "jinja2")


def require_extra(*, server: bool = False) -> None:
    """Refuse, with the install line, when the ``dashboard`` extra is not installed."""
    wanted = (*EXTRA_MODULES, "uvicorn") if server else EXTRA_MODULES
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            code="DASHBOARD_EXTRA_MISSING",
            cause=f"the dashboard needs the packages of the workhorse[dashboard] extra; missing: {', '.join(missing)}",
            fix="pip install 'workhorse[dashboard]'",
        )


def make_asgi_app(
    app: App,
    *,
    token: str | None = None,
    read_only: bool = False,
    refresh_seconds: float = 5.0,
) -> Any:
    """The dashboard of ``app`` as an ASGI application (a ``starlette.applications.Starlette``).

    ``token``: when given, every request must carry it (``Authorization: Bearer T``, or
    ``?token=T`` once, which sets a session cookie), under any host name. Without one, nothing is
    asked, and only requests whose ``Host`` names loopback (``localhost``, ``127.0.0.0/8``,
    ``[::1]``) are answered; any other is ``403 DASHBOARD_HOST_REFUSED`` (a page of another site
    re-pointed at 127.0.0.1 by DNS rebinding would otherwise read and act as the operator). So a
    dashboard served or mounted under a real name needs a token, even behind the host app's own
    login. ``read_only``:
    no action is shown or accepted. ``refresh_seconds``: how often an open overview asks for
    fresh numbers (each refresh is one ``app.admin.stats`` and one counter series read).
    Mount it with ``Mount("/workhorse", app=make_asgi_app(app, token=...))``; links follow the
    mount path.
    """
    require_extra()
    from workhorse.dashboard.web import build

    return build(app, token=token, read_only=read_only, refresh_seconds=refresh_seconds)


__all__ = ["ENV_TOKEN", "make_asgi_app", "require_extra"]
