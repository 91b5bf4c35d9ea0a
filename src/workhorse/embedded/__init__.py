"""The embedded PostgreSQL, one folder: a private dev/test server that workhorse starts for you
when no database URL is given (``WORKHORSE_DATABASE_URL`` unset), under ``./.workhorse/`` or
``WORKHORSE_HOME``.

    server  finding the binaries, starting (once per home, under a file lock), stopping, status
    home    where the home is (found upward as git finds ``.git``), whether a command may create
            it, and the orphans: servers kept away for a home that no longer exists
    pid     the server's pid file: which postmaster it names, a stale one cleared
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
