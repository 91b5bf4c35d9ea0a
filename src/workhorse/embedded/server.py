"""The embedded PostgreSQL: a private dev/test server that workhorse starts for you.

Design: docs/guides/embedded.md
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from filelock import FileLock, Timeout

from workhorse.embedded.home import (
    AWAY_ROOT,
    ENV_HOME,
    ENV_URL,
    _create_allowed,
    _not_found,
    home_dir,
)
from workhorse.embedded.pid import clear_stale_pidfile as _clear_stale_pidfile
from workhorse.embedded.pid import is_postmaster as _is_postmaster
from workhorse.embedded.pid import recorded_pid as _recorded_pid
from workhorse.errors import EmbeddedServerError

if TYPE_CHECKING:
    import pwd

__all__ = [
    "PGSERVER_PACKAGE",
    "SYSTEM_ROOTS",
    "ensure_started",
    "find_binaries",
    "resolve_database_url",
    "restart",
    "status",
    "stop",
]

# Where find_binaries() looks after PATH; module constants so tests can point them elsewhere.
PGSERVER_PACKAGE = "pgserver"
SYSTEM_ROOTS: tuple[Path, ...] = (Path("/usr/lib/postgresql"),)

_BINARIES = ("initdb", "pg_ctl", "postgres")
_HOST = "127.0.0.1"
_LOCK_TIMEOUT = 180.0
_SETTINGS = "-c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
_Info = dict[str, Any]
_NOT_RUN = shutil.ignore_patterns("include")  # headers: not needed to run a server
_Done = subprocess.CompletedProcess[str]


def find_binaries(*, copy_away: bool = False) -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    As root, a candidate the server's unprivileged user cannot reach (a virtualenv under a 0700
    home, say) is passed over for the next one; when none is left and ``copy_away`` (starting a
    server) is set, the ``pgserver`` install passed over is copied, once per build, to
    ``AWAY_ROOT/pginstall-<hash>/``, where that user can reach it.
    """
    user = _server_user()
    searched = [f"the {PGSERVER_PACKAGE!r} package"]
    unreachable: Path | None = None  # a pgserver install the server user cannot traverse
    spec = importlib.util.find_spec(PGSERVER_PACKAGE)  # locates the package without importing it
    for location in (spec.submodule_search_locations or []) if spec else []:
        if _usable(candidate := Path(location) / "pginstall" / "bin", user):
            return candidate
        if unreachable is None and _has_binaries(candidate):
            unreachable = candidate.parent
    searched.append("pg_ctl on PATH")
    if (on_path := shutil.which("pg_ctl")) and _usable(candidate := Path(on_path).resolve().parent, user):
        return candidate
    for root in SYSTEM_ROOTS:
        searched.append(f"{root}/*/bin")
        for candidate in sorted(root.glob("*/bin"), key=_major_minor, reverse=True):
            if _usable(candidate, user):
                return candidate
    if unreachable is not None and user is not None:
        note = f"found in {unreachable}, which {user.pw_name!r} cannot traverse"
        if copy_away:
            try:
                return _copied_away(unreachable, user)
            except (OSError, EmbeddedServerError) as exc:
                note += f", and not copied to {AWAY_ROOT}: {exc}"
        searched[0] += f" ({note})"
    raise EmbeddedServerError(
        cause=f"no PostgreSQL server binaries ({', '.join(_BINARIES)}) found; searched {', '.join(searched)}",
        fix="pip install 'workhorse[embedded]' for bundled binaries, "
        f"or set {ENV_URL}=postgresql://user@host:5432/dbname to use your own server",
        code="EMBEDDED_BINARIES_MISSING",
    )


def resolve_database_url(explicit: str | None = None, *, home: str | os.PathLike[str] | None = None) -> str:
    """The explicit URL, else ``$WORKHORSE_DATABASE_URL``, else the embedded server (started if
    needed; created too unless within ``creation(allowed=False)``). The first time a process falls
    back to the embedded server it says so on stderr, once: a shell without the variable must never
    write to another database unknowingly."""
    url = explicit or os.environ.get(ENV_URL)
    if url:
        return url
    url = ensure_started(home, create=_create_allowed.get())
    where = home_dir(home)
    if where not in _announced:
        _announced.add(where)
        place = _existing(where, _server_user())
        away = f", its data kept in {place / 'data'}" if place is not None and place != where else ""
        print(
            f"workhorse: using the embedded PostgreSQL under {where}{away} ({url}); "
            f"set {ENV_URL} to use another database",
            file=sys.stderr,
        )
    return url


_announced: set[Path] = set()  # the homes this process has said it uses


def ensure_started(home: str | os.PathLike[str] | None = None, *, create: bool = True) -> str:
    """Start the home's server unless it already runs (initialising it on first use, unless
    ``create`` is false: then a home without a cluster is ``EMBEDDED_NOT_FOUND``); return its URL."""
    h = home_dir(home)
    info = _read_info(h)
    user = _server_user()
    place = _existing(h, user)
    if info is not None and place is not None and _serving(info["port"], place / "data"):
        return _url(info["port"])
    if place is None and not create:
        raise _not_found(h, home)
    h.mkdir(parents=True, exist_ok=True)
    with _locked(h):
        info = _read_info(h)  # another process may have started it while we waited
        bins = _binaries(info, copy_away=True)
        place = h if user is None else _grant_access(h, bins, user)
        if not (place / "data").is_dir():
            _initdb(place, bins, user)
            info = None
        if info is None:
            info = _write_info(h, _free_port(), bins, place)
        if not _serving(info["port"], place / "data"):
            info = _start(h, place, bins, user, info)
        return _url(info["port"])


def stop(home: str | os.PathLike[str] | None = None) -> bool:
    """Stop the home's server (fast shutdown, data kept). Answers whether one was running."""
    h = home_dir(home)
    user = _server_user()
    place = _existing(h, user)
    if place is None:
        return False
    data = place / "data"
    with _locked(h):
        pid = _recorded_pid(data)
        if pid is None or not _is_postmaster(pid, data):
            return False
        done = _pg_ctl(place, _binaries(_read_info(h)), user, "stop", "-m", "fast", "-w", "-t", "60")
        if done.returncode != 0:
            raise _failed("pg_ctl stop", done, f"read {place / 'postgres.log'}", "EMBEDDED_STOP_FAILED")
        return True


def restart(home: str | os.PathLike[str] | None = None, *, mode: str = "fast") -> None:
    """Restart the home's server with ``pg_ctl restart -m MODE`` (``fast`` or ``immediate``): a
    fault drill, for showing that workers ride out a database restart."""
    if mode not in ("fast", "immediate"):
        raise EmbeddedServerError(
            cause=f"restart mode expected 'fast' or 'immediate', got {mode!r}",
            fix="embedded.restart(home, mode='immediate')",
            code="CONFIG_INVALID",
        )
    h = home_dir(home)
    user = _server_user()
    with _locked(h):
        info = _read_info(h)
        place = _existing(h, user)
        if info is None or place is None:
            raise EmbeddedServerError(
                cause=f"no embedded server was ever started under {h}",
                fix="workhorse db start",
                code="EMBEDDED_START_FAILED",
            )
        # With -o, pg_ctl restart drops the -D it would read from postmaster.opts: pass it again, as
        # pg_ctl start does, so the new postmaster's command line names its cluster (_is_postmaster).
        options = f'-D "{place / "data"}" {_options(info)}'
        args = ["-l", place / "postgres.log", "-w", "-t", "60", "-o", options, "restart", "-m", mode]
        with tempfile.TemporaryFile("w+") as out:  # a file: the new postmaster must not hold our pipes
            done = _pg_ctl(place, _binaries(info), user, *args, stdout=out, stderr=subprocess.STDOUT)
            out.seek(0)
            done.stdout = f"{_tail(out.read(), 3)} | log: {_log_tail(place)}"
        if done.returncode != 0:
            raise _failed("pg_ctl restart", done, f"read {place / 'postgres.log'}", "EMBEDDED_START_FAILED")


def status(home: str | os.PathLike[str] | None = None) -> dict[str, object]:
    """Where the home is, whether its server runs, its URL and port, the binaries in use, and where
    its cluster lives (``data``: under the home, or kept away from it; None before the first start)."""
    h = home_dir(home)
    info = _read_info(h)
    port: int | None = info["port"] if info else None
    try:
        binaries: str | None = str(_binaries(info))
    except EmbeddedServerError:
        binaries = None
    try:
        place = _existing(h, _server_user())
    except EmbeddedServerError:  # root without a server user: nothing can have been started
        place = None
    data = place / "data" if place is not None else None
    running = port is not None and data is not None and _serving(port, data)
    url = _url(port) if port is not None else None
    shown = str(data) if data is not None else None
    return {"home": str(h), "running": running, "url": url, "port": port, "binaries": binaries, "data": shown}


def _major_minor(bin_dir: Path) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", bin_dir.parent.name)]


def _usable(directory: Path, user: pwd.struct_passwd | None) -> bool:
    return _has_binaries(directory) and (user is None or _traversable(directory, user))


def _traversable(path: Path, user: pwd.struct_passwd, *, opened: bool = False) -> bool:
    """Whether ``user`` can traverse every directory down to ``path`` (``opened``: once ``path``
    itself has ``o+x``, which _grant_access gives the home)."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for part in (path, *path.parents):
        st = part.stat()
        mode = st.st_mode | (stat.S_IXOTH if opened and part == path else 0)
        other_bit = stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
        if not mode & (stat.S_IXUSR if st.st_uid == user.pw_uid else other_bit):
            return False
    return True


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in _BINARIES)


def _binaries(info: _Info | None, *, copy_away: bool = False) -> Path:
    # A cluster only runs under the major version that made it: keep using the binaries that did.
    recorded = Path(info["binaries"]) if info and info.get("binaries") else None
    return recorded if recorded is not None and _has_binaries(recorded) else find_binaries(copy_away=copy_away)


def _url(port: int) -> str:
    return f"postgresql://postgres@{_HOST}:{port}/postgres"


def _read_info(h: Path) -> _Info | None:
    try:
        info = json.loads((h / "server.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("port"), int) else None


def _write_info(h: Path, port: int, bins: Path, place: Path) -> _Info:
    info: _Info = {"url": _url(port), "host": _HOST, "port": port, "user": "postgres", "database": "postgres"}
    info |= {"data": str(place / "data"), "binaries": str(bins)}
    scratch = h / "server.json.tmp"
    scratch.write_text(json.dumps(info, indent=2) + "\n")
    scratch.replace(h / "server.json")
    return info


@contextlib.contextmanager
def _locked(h: Path) -> Iterator[None]:
    try:
        with FileLock(h / "lock", timeout=_LOCK_TIMEOUT):
            yield
    except Timeout as exc:
        raise EmbeddedServerError(
            cause=f"another process held {h / 'lock'} for over {_LOCK_TIMEOUT:.0f}s",
            fix=f"find the stuck process (fuser {h / 'lock'}) and end it, then retry",
            code="EMBEDDED_START_FAILED",
        ) from exc


def _serving(port: int, data: Path) -> bool:
    """Whether our cluster (not some other server that took the port) accepts connections there."""
    try:
        with psycopg.connect(_url(port), connect_timeout=2, autocommit=True) as conn:
            row = conn.execute("select current_setting('data_directory')").fetchone()
    except psycopg.Error:
        return False
    return row is not None and Path(row[0]).resolve() == data.resolve()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds: TIME_WAIT is fine
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
        return True


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged account PostgreSQL runs as when we are root, which it refuses."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise EmbeddedServerError(
        cause="running as root, which PostgreSQL refuses, and there is no 'postgres' or 'nobody' user",
        fix="useradd --system postgres   # or run as a non-root user",
        code="EMBEDDED_NO_USER",
    )


def _away(h: Path) -> Path:
    """Where root keeps the cluster of home ``h`` when the server user cannot traverse ``h``."""
    return AWAY_ROOT / hashlib.sha256(os.fsencode(h)).hexdigest()[:16]


def _away_is_ours(away: Path, h: Path) -> bool:
    try:
        return (away / "home").read_bytes() == os.fsencode(h) + b"\n"
    except OSError:
        return False


def _existing(h: Path, user: pwd.struct_passwd | None) -> Path | None:
    """Where home ``h``'s cluster is (the directory holding ``data/``), or None if it has none yet."""
    if not h.is_dir():
        return None
    if (h / "data").is_dir():
        return h
    if user is None:  # only root keeps clusters away
        return None
    away = _away(h)
    return away if (away / "data").is_dir() and _away_is_ours(away, h) else None


def _grant_access(h: Path, bins: Path, user: pwd.struct_passwd) -> Path:
    """Let ``user`` reach the binaries and the cluster; answer where the cluster is (or is to be)."""
    if not _traversable(bins, user):
        raise EmbeddedServerError(
            cause=f"PostgreSQL must run as {user.pw_name!r} (not root), who cannot traverse {bins}",
            fix=f"chmod o+x {bins}   # or install the binaries where {user.pw_name} can reach them",
            code="EMBEDDED_PATH_NOT_TRAVERSABLE",
        )
    place = _existing(h, user)
    if place is None:
        place = h if _traversable(h, user, opened=True) else _away(h)
    if place == h:  # as always: the home itself is workhorse's, and gets o+x
        h.chmod(h.stat().st_mode | stat.S_IXOTH)
        if not _traversable(h, user):  # a cluster made here before its path was closed
            raise EmbeddedServerError(
                cause=f"PostgreSQL must run as {user.pw_name!r} (not root), who cannot traverse {h}, "
                f"where its cluster is ({h / 'data'})",
                fix=f"chmod o+x the directories above {h}   # or set {ENV_HOME} to a new directory",
                code="EMBEDDED_PATH_NOT_TRAVERSABLE",
            )
    else:
        _make_away(place, h, user)
    log = place / "postgres.log"
    log.touch()
    os.chown(log, user.pw_uid, user.pw_gid)
    return place


def _copied_away(install: Path, user: pwd.struct_passwd) -> Path:
    """The ``bin`` of a copy of pgserver's ``install`` that ``user`` can reach, made once per build."""
    built = (install / "bin" / "postgres").stat()
    key = hashlib.sha256(os.fsencode(install) + f"\0{built.st_size}\0{built.st_mtime_ns}".encode()).hexdigest()
    target = AWAY_ROOT / f"pginstall-{key[:16]}"
    # The wheel's layout, kept: the binaries find their vendored libraries at $ORIGIN/../../../pgserver.libs.
    bins = target / "pgserver" / "pginstall" / "bin"
    if not _has_binaries(bins):
        _own_dir(AWAY_ROOT, f"the copy of {install}")
        scratch = Path(tempfile.mkdtemp(prefix=".pginstall-", dir=AWAY_ROOT))
        try:
            copy = scratch / "copy"
            shutil.copytree(install, copy / "pgserver" / "pginstall", symlinks=True, ignore=_NOT_RUN)
            if (libs := install.parent.parent / "pgserver.libs").is_dir():
                shutil.copytree(libs, copy / "pgserver.libs", symlinks=True)
            for path in (copy, *copy.rglob("*")):
                if not path.is_symlink():  # readable by all whatever the umask pip ran under
                    path.chmod(0o755 if path.is_dir() or path.stat().st_mode & 0o111 else 0o644)
            with contextlib.suppress(OSError):  # another process put its copy there first
                copy.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if not _usable(bins, user):
        raise EmbeddedServerError(
            cause=f"{bins} is not usable by {user.pw_name!r}",
            fix=f"remove {target} and retry",
            code="EMBEDDED_BINARIES_MISSING",
        )
    return bins


def _own_dir(directory: Path, purpose: str) -> None:
    """Create (or check) ``directory``: a real directory of root's, mode 0711."""
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o711)
    st = directory.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise EmbeddedServerError(
            cause=f"{directory}, meant for {purpose}, is not a directory owned by root",
            fix=f"remove {directory}, or set {ENV_HOME} to a directory the server user can traverse",
            code="EMBEDDED_PATH_NOT_TRAVERSABLE",
        )
    if stat.S_IMODE(st.st_mode) != 0o711:
        directory.chmod(0o711)


def _make_away(away: Path, h: Path, user: pwd.struct_passwd) -> None:
    """Create (or check) ``AWAY_ROOT`` and ``away``: root's, 0711, and ``away`` naming home ``h``."""
    fix = f"set {ENV_HOME} to a directory {user.pw_name} can traverse"
    try:
        for directory in (away.parent, away):
            _own_dir(directory, f"the cluster of {h}, which {user.pw_name!r} cannot traverse")
        if not (away / "home").exists():
            scratch = away / "home.tmp"
            scratch.write_bytes(os.fsencode(h) + b"\n")
            scratch.replace(away / "home")
    except OSError as exc:
        raise EmbeddedServerError(
            cause=f"{h} is not reachable by {user.pw_name!r}, who runs PostgreSQL, and its cluster "
            f"cannot be kept in {away}: {exc}",
            fix=fix,
            code="EMBEDDED_PATH_NOT_TRAVERSABLE",
        ) from exc
    if not _away_is_ours(away, h):
        raise EmbeddedServerError(
            cause=f"{away}, where the cluster of {h} would be kept, belongs to another home (named in {away / 'home'})",
            fix=fix,
            code="EMBEDDED_PATH_NOT_TRAVERSABLE",
        )
    if not _traversable(away, user):
        raise EmbeddedServerError(
            cause=f"{h} is not reachable by {user.pw_name!r}, who runs PostgreSQL, nor is {away}",
            fix=f"chmod o+x the parents of {AWAY_ROOT}, or {fix}",
            code="EMBEDDED_PATH_NOT_TRAVERSABLE",
        )


def _run(user: pwd.struct_passwd | None, *args: object, **kw: Any) -> _Done:
    """Run a server binary, as ``user`` when we are root; output captured unless redirected."""
    if user is not None:
        kw |= {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run([str(a) for a in args], check=False, text=True, stdin=subprocess.DEVNULL, **kw)


def _pg_ctl(place: Path, bins: Path, user: pwd.struct_passwd | None, *args: object, **kw: Any) -> _Done:
    return _run(user, bins / "pg_ctl", "-D", place / "data", *args, cwd=place, **kw)


def _failed(what: str, done: _Done, fix: str, code: str) -> EmbeddedServerError:
    output = (done.stdout or "") + (done.stderr or "")
    return EmbeddedServerError(f"{what} failed (exit {done.returncode}): {_tail(output)}", fix, code=code)


def _initdb(place: Path, bins: Path, user: pwd.struct_passwd | None) -> None:
    scratch = place / "data.init"
    shutil.rmtree(scratch, ignore_errors=True)  # left by an initdb that was killed midway
    scratch.mkdir(mode=0o700)
    if user is not None:
        os.chown(scratch, user.pw_uid, user.pw_gid)
    args = ["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]
    done = _run(user, bins / "initdb", "-D", scratch, *args, cwd=place)
    if done.returncode != 0:
        raise _failed("initdb", done, "fix the cause shown, then retry", "EMBEDDED_INIT_FAILED")
    scratch.rename(place / "data")


def _options(info: _Info) -> str:
    return f"-p {info['port']} -c listen_addresses={_HOST} -c unix_socket_directories='' {_SETTINGS}"


def _start(h: Path, place: Path, bins: Path, user: pwd.struct_passwd | None, info: _Info) -> _Info:
    _clear_stale_pidfile(place / "data")
    for attempt in (1, 2):
        if not _port_free(info["port"]):
            info = _write_info(h, _free_port(), bins, place)
        args = ["-l", place / "postgres.log", "-w", "-t", "60", "-o", _options(info), "start"]
        # A file, not a pipe: the postmaster outlives pg_ctl and must not hold our caller's pipes open.
        with tempfile.TemporaryFile("w+") as out:
            done = _pg_ctl(place, bins, user, *args, stdout=out, stderr=subprocess.STDOUT)
            out.seek(0)
            done.stdout = f"{_tail(out.read(), 3)} | log: {_log_tail(place)}"
        if done.returncode == 0:
            return info
        if attempt == 2 or _port_free(info["port"]):
            raise _failed("pg_ctl start", done, f"read {place / 'postgres.log'}", "EMBEDDED_START_FAILED")
        # else something took the port between our check and the server's bind: pick another
    raise AssertionError("unreachable")


def _log_tail(place: Path) -> str:
    with contextlib.suppress(OSError), (place / "postgres.log").open("rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
        return _tail(log.read().decode(errors="replace"))
    return "(no log)"


def _tail(text: str, lines: int = 15) -> str:
    return " / ".join(line for line in text.strip().splitlines()[-lines:] if line.strip()) or "(no output)"
