"""The embedded PostgreSQL, one folder: a private dev/test server workhorse starts when no database URL is given.
It lives under ``./.workhorse/`` or ``WORKHORSE_HOME``. Modules: ``server`` (binaries, start once
per home, stop, status), ``home`` (finding it, orphans), ``pid``.

Design: docs/guides/embedded.md
"""

from workhorse.embedded.home import (
    AWAY_ROOT,
    ENV_HOME,
    ENV_URL,
    HOME_NAME,
    creation,
    home_dir,
    orphans,
    stop_orphans,
)
from workhorse.embedded.server import (
    PGSERVER_PACKAGE,
    SYSTEM_ROOTS,
    ensure_started,
    find_binaries,
    resolve_database_url,
    restart,
    status,
    stop,
)

__all__ = [
    "AWAY_ROOT",
    "ENV_HOME",
    "ENV_URL",
    "HOME_NAME",
    "PGSERVER_PACKAGE",
    "SYSTEM_ROOTS",
    "creation",
    "ensure_started",
    "find_binaries",
    "home_dir",
    "orphans",
    "resolve_database_url",
    "restart",
    "status",
    "stop",
    "stop_orphans",
]
