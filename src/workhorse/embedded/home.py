"""Where the embedded database lives (``workhorse.embedded`` runs it): its home, found as git finds
``.git``; whether a command may create it; and the orphans, servers kept away for a home that no
longer exists, which every ``workhorse db`` command stops."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from workhorse.embedded.pid import is_postmaster as _is_postmaster
from workhorse.embedded.pid import recorded_pid as _recorded_pid
from workhorse.errors import EmbeddedServerError

ENV_URL = "WORKHORSE_DATABASE_URL"
ENV_HOME = "WORKHORSE_HOME"
# Where root keeps the clusters of homes the server user cannot traverse (``workhorse.embedded``).
AWAY_ROOT = Path("/var/lib/workhorse")

HOME_NAME = ".workhorse"


def home_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """The embedded server's home: ``home``, else ``$WORKHORSE_HOME``, else the nearest
    ``.workhorse`` directory in the current directory or one above it, else ``./.workhorse``."""
    raw = home if home is not None else os.environ.get(ENV_HOME)
    if raw:
        return Path(raw).expanduser().resolve()
    found, searched = _search_upward(Path.cwd().resolve())
    return found if found is not None else searched[0]


def _search_upward(start: Path) -> tuple[Path | None, list[Path]]:
    """The nearest ``.workhorse`` directory at ``start`` or above (git's rule for ``.git``), and
    every place looked at, nearest first."""
    searched = []
    for directory in (start, *start.parents):
        candidate = directory / HOME_NAME
        searched.append(candidate)
        if candidate.is_dir():
            return candidate, searched
    return None, searched


# Whether ensure_started may run initdb: the CLI's read-only commands refuse to (creation(False)).
_create_allowed: ContextVar[bool] = ContextVar("workhorse_embedded_create", default=True)


@contextlib.contextmanager
def creation(*, allowed: bool) -> Iterator[None]:
    """Within the block, whether starting the embedded server may create its cluster (``initdb``);
    when not, a home without one is refused with ``EMBEDDED_NOT_FOUND``. Only ``migrate``,
    ``demo`` and ``db start`` of the command line allow it; a library ``App()`` does by default."""
    token = _create_allowed.set(allowed)
    try:
        yield
    finally:
        _create_allowed.reset(token)


def _not_found(h: Path, home: str | os.PathLike[str] | None) -> EmbeddedServerError:
    if home is None and not os.environ.get(ENV_HOME):
        _, searched = _search_upward(Path.cwd().resolve())
        where = f"no {HOME_NAME} directory with a database in {searched[0].parent} or any directory above it"
        if h.is_dir():
            where = f"{h} holds no database yet (searched upward from {searched[0].parent})"
    else:
        where = f"{h} (from {'the home given' if home is not None else ENV_HOME}) holds no database yet"
    return EmbeddedServerError(
        cause=f"no embedded PostgreSQL: {where}; this command reads a database and does not create one",
        fix=f"cd to your project (where `workhorse migrate` made {HOME_NAME}), or create one here: "
        f"workhorse migrate; or set {ENV_URL}=postgresql://user@host:5432/dbname",
        code="EMBEDDED_NOT_FOUND",
    )


def orphans() -> list[dict[str, object]]:
    """The clusters kept away (``AWAY_ROOT/<hash>/``) whose home no longer exists: its ``home``
    file names a directory that is gone (a clone deleted after ``make test``). Each: ``home``,
    ``data``, ``running`` (its postmaster's pid, or None) and ``remove`` (the command that deletes it)."""
    found: list[dict[str, object]] = []
    try:
        places = sorted(p for p in AWAY_ROOT.iterdir() if not p.name.startswith(("pginstall-", ".")))
    except OSError:  # none kept away, or not ours to list (only root keeps clusters away)
        return found
    for place in places:
        try:
            home = Path(os.fsdecode((place / "home").read_bytes().rstrip(b"\n")))
        except OSError:
            continue
        data = place / "data"
        if home.exists() or not data.is_dir():
            continue
        pid = _recorded_pid(data)
        running = pid if pid is not None and _is_postmaster(pid, data) else None
        found.append({"home": str(home), "data": str(data), "running": running, "remove": f"rm -r {place}"})
    return found


def stop_orphans(*, wait: float = 60.0) -> list[dict[str, object]]:
    """Stop the running servers of ``orphans()`` (a fast shutdown: SIGINT to the postmaster, as
    ``pg_ctl stop -m fast`` sends; their binaries were named in the removed home). Their data is
    kept. Answers every orphan, each with ``stopped``: whether this call stopped it."""
    found = orphans()
    for orphan in found:
        pid, data = orphan["running"], Path(str(orphan["data"]))
        orphan["stopped"] = False
        if not isinstance(pid, int):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + wait
        while _is_postmaster(pid, data) and time.monotonic() < deadline:
            time.sleep(0.05)
        orphan["stopped"] = not _is_postmaster(pid, data)
        orphan["running"] = None if orphan["stopped"] else pid
    return found
