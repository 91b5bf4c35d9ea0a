"""The embedded PostgreSQL: real servers in per-test homes, always stopped afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse.embedded import server as embedded
from workhorse.errors import EmbeddedServerError

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="only root hands the server over, and keeps clusters away")
# The tests marked so run twice: with the cluster under the home, and (as root) kept away from a home
# the server user cannot traverse.
both_places = pytest.mark.parametrize("home", ["reachable", "kept_away"], indirect=True)


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    kind = getattr(request, "param", "reachable")
    if not AS_ROOT:
        if kind == "kept_away":
            pytest.skip("only root keeps a cluster away from its home")
        yield tmp_path / "wh"
        embedded.stop(tmp_path / "wh")
        return
    # As root the server runs as an unprivileged user, who cannot traverse pytest's tmp_path:
    # /tmp/pytest-of-root is 0700, and every pytest session on the machine resets it to 0700, so
    # opening it up is racy. A directory of our own under /tmp, traversable by all, is not; left
    # 0700 (as mktemp -d makes it), it is a home the server user cannot reach.
    base = Path(tempfile.mkdtemp(prefix="workhorse-embedded-"))
    if kind == "reachable":
        base.chmod(0o711)
    try:
        yield base / "wh"
        assert mode(base) == (0o711 if kind == "reachable" else 0o700)  # never loosened by workhorse
    finally:
        forget(base / "wh")
        shutil.rmtree(base)


def forget(h: Path) -> None:
    """Stop the home's server and remove its cluster when it was kept away from the home."""
    embedded.stop(h)
    shutil.rmtree(embedded._away(h.resolve()), ignore_errors=True)


def data_of(h: Path) -> Path:
    """The home's cluster, wherever it lives (under the home, or kept away from it)."""
    data = embedded.status(h)["data"]
    assert isinstance(data, str), f"{h} has no cluster"
    return Path(data)


def postmaster_pid(h: Path) -> int:
    return int((data_of(h) / "postmaster.pid").read_text().splitlines()[0])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def select_one(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("select 1").fetchone()
    assert row is not None
    return int(row[0])


def postmasters_for(data: Path) -> list[int]:
    """Pids of processes running ``postgres -D <data>`` (children rename themselves, so only postmasters)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"postgres") and os.fsencode(data) in argv:
            found.append(int(proc.name))
    return found


def test_ensure_started_serves_and_is_reused(home: Path) -> None:
    url = embedded.ensure_started(home)
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    assert select_one(url) == 1
    pid = postmaster_pid(home)

    assert embedded.ensure_started(home) == url
    assert postmaster_pid(home) == pid
    info = embedded.status(home)
    assert info["running"] is True
    assert info["url"] == url
    assert info["home"] == str(home)
    assert isinstance(info["port"], int)
    assert url.endswith(f":{info['port']}/postgres")


@both_places
def test_ten_racing_processes_start_one_server(home: Path) -> None:
    code = f"from workhorse.embedded import ensure_started; print(ensure_started({str(home)!r}))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(10)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=50)
            results.append((proc.returncode, out.strip(), err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    assert [rc for rc, _, _ in results] == [0] * 10, [err for _, _, err in results]
    urls = {out for _, out, _ in results}
    assert len(urls) == 1
    assert select_one(urls.pop()) == 1
    # A second initdb would have failed on the existing cluster; a second start would log twice.
    place = data_of(home).parent
    assert not (place / "data.init").exists()
    log = (place / "postgres.log").read_text()
    assert log.count("database system is ready to accept connections") == 1
    assert postmasters_for(place / "data") == [postmaster_pid(home)]


@both_places
def test_stop_then_restart_keeps_data(home: Path) -> None:
    url = embedded.ensure_started(home)
    with psycopg.connect(url) as conn:
        conn.execute("create table kept (v text)")
        conn.execute("insert into kept values ('still here')")

    assert embedded.stop(home) is True
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2).close()
    assert embedded.status(home)["running"] is False
    assert embedded.stop(home) is False

    assert embedded.ensure_started(home) == url
    with psycopg.connect(url) as conn:
        assert conn.execute("select v from kept").fetchall() == [("still here",)]


@both_places
def test_restarts_after_postmaster_was_killed(home: Path) -> None:
    url = embedded.ensure_started(home)
    pid = postmaster_pid(home)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while embedded.status(home)["running"] and time.monotonic() < deadline:
        time.sleep(0.05)

    assert embedded.ensure_started(home) == url
    assert postmaster_pid(home) != pid
    assert select_one(url) == 1


def test_taken_port_moves_the_server(home: Path) -> None:
    old_url = embedded.ensure_started(home)
    old_port = embedded.status(home)["port"]
    assert isinstance(old_port, int)
    embedded.stop(home)

    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's TIME_WAITs
        squatter.bind(("127.0.0.1", old_port))
        squatter.listen()
        url = embedded.ensure_started(home)
        assert url != old_url
        assert json.loads((home / "server.json").read_text())["url"] == url
        assert select_one(url) == 1


def test_start_failure_reports_the_log(home: Path) -> None:
    embedded.ensure_started(home)
    embedded.stop(home)
    with (data_of(home) / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'not a size'\n")

    with pytest.raises(EmbeddedServerError) as caught:
        embedded.ensure_started(home)
    assert caught.value.code == "EMBEDDED_START_FAILED"
    assert "shared_buffers" in caught.value.cause
    assert embedded.status(home)["running"] is False


def test_stop_without_a_server_answers_false(tmp_path: Path) -> None:
    assert embedded.stop(tmp_path / "never") is False
    assert not (tmp_path / "never").exists()


def test_find_binaries_missing_names_both_fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "PGSERVER_PACKAGE", "workhorse_no_such_package")
    monkeypatch.setattr(embedded, "SYSTEM_ROOTS", (tmp_path,))
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(EmbeddedServerError) as caught:
        embedded.find_binaries()
    assert caught.value.code == "EMBEDDED_BINARIES_MISSING"
    assert "workhorse[embedded]" in caught.value.fix
    assert "WORKHORSE_DATABASE_URL" in caught.value.fix
    assert str(tmp_path) in caught.value.cause
    assert embedded.status(tmp_path / "wh")["binaries"] is None


def test_find_binaries_prefers_highest_system_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # As root, candidates the server user cannot reach are skipped, and pytest's tmp_path is 0700.
    tmp_path = Path(tempfile.mkdtemp(prefix="workhorse-bins-", dir="/tmp"))
    tmp_path.chmod(0o755)
    for version in ("9.6", "15", "16"):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("initdb", "pg_ctl", "postgres"):
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
    (tmp_path / "17" / "bin").mkdir(parents=True)  # incomplete: no binaries in it
    monkeypatch.setattr(embedded, "PGSERVER_PACKAGE", "workhorse_no_such_package")
    monkeypatch.setattr(embedded, "SYSTEM_ROOTS", (tmp_path,))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    try:
        assert embedded.find_binaries() == tmp_path / "16" / "bin"
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _fake_install(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True)
    for name in ("initdb", "pg_ctl", "postgres"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_find_binaries_uses_pgserver_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pgserver install the server user can reach wins over PATH and the system's (issue 29: the
    test no longer depends on where this checkout's .venv lives)."""
    base = Path(tempfile.mkdtemp(prefix="workhorse-bins-", dir="/tmp"))
    base.chmod(0o755)  # reachable by the server user when we are root
    try:
        package = base / "site" / "workhorse_fake_pgserver"
        bins = _fake_install(package / "pginstall" / "bin")
        (package / "__init__.py").write_text("")
        on_path = _fake_install(base / "path")
        _fake_install(base / "system" / "16" / "bin")
        monkeypatch.syspath_prepend(str(base / "site"))
        monkeypatch.setattr(embedded, "PGSERVER_PACKAGE", "workhorse_fake_pgserver")
        monkeypatch.setattr(embedded, "SYSTEM_ROOTS", (base / "system",))
        monkeypatch.setenv("PATH", str(on_path))
        assert embedded.find_binaries() == bins
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_find_binaries_takes_the_real_pgserver_only_where_the_server_user_reaches_it() -> None:
    """The installed pgserver, if any: chosen when the server user can traverse its path, else passed
    over (as root, from a checkout under a 0700 directory) for the next candidate, never refused."""
    pgserver = pytest.importorskip("pgserver")
    bins = Path(pgserver.__file__).parent / "pginstall" / "bin"
    user = embedded._server_user()
    reachable = user is None or embedded._traversable(bins, user)
    if reachable:
        assert embedded.find_binaries() == bins
        return
    try:
        found: Path | None = embedded.find_binaries()
    except EmbeddedServerError:  # nothing else installed: refused, naming the one passed over
        found = None
    assert found != bins


def test_resolve_database_url_order(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", "postgresql://env@example/db")
    assert embedded.resolve_database_url("postgresql://arg@example/db", home=home) == "postgresql://arg@example/db"
    assert embedded.resolve_database_url(home=home) == "postgresql://env@example/db"
    assert not home.exists()
    assert capsys.readouterr().err == ""  # a named database is used without a word

    monkeypatch.delenv("WORKHORSE_DATABASE_URL")
    url = embedded.resolve_database_url(home=home)
    assert url == embedded.ensure_started(home)
    assert select_one(url) == 1
    assert embedded.resolve_database_url(home=home) == url
    notice = capsys.readouterr().err
    # the fallback says so once a process, naming where and how to choose another (issue 16)
    assert notice.count("workhorse: using the embedded PostgreSQL") == 1, notice
    assert str(home) in notice and "WORKHORSE_DATABASE_URL" in notice


def test_home_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKHORSE_HOME", raising=False)
    if not any((parent / ".workhorse").is_dir() for parent in tmp_path.resolve().parents):  # else found upward
        assert embedded.home_dir() == tmp_path.resolve() / ".workhorse"
    monkeypatch.setenv("WORKHORSE_HOME", "from-env")
    assert embedded.home_dir() == tmp_path.resolve() / "from-env"
    assert embedded.home_dir("arg") == tmp_path.resolve() / "arg"
    assert embedded.home_dir().is_absolute()


def test_a_reachable_home_keeps_its_cluster(home: Path) -> None:
    url = embedded.ensure_started(home)
    assert data_of(home) == home / "data"
    assert json.loads((home / "server.json").read_text())["data"] == str(home / "data")
    assert (home / "postgres.log").exists()
    assert select_one(url) == 1
    if AS_ROOT:
        assert not embedded._away(home).exists()


@root_only
def test_root_keeps_the_cluster_of_an_untraversable_home_away() -> None:
    """Issue 16, defect 1: as root, under a 0700 directory (mktemp -d, /root/app), the server user
    cannot reach ./.workhorse; its cluster is kept where that user can, tied to the home, and no
    permission on the user's directories changes."""
    locked = Path(tempfile.mkdtemp(prefix="workhorse-locked-"))  # 0700, as mktemp -d makes it
    first, second = locked / "app" / ".workhorse", locked / "copy" / ".workhorse"
    first.mkdir(mode=0o700, parents=True)
    (locked / "app").chmod(0o700)
    user = embedded._server_user()
    assert user is not None
    try:
        modes = {path: mode(path) for path in (locked, locked / "app", first)}
        assert modes == {locked: 0o700, locked / "app": 0o700, first: 0o700}

        url = embedded.ensure_started(first)
        assert select_one(url) == 1
        away = embedded._away(first)
        data = data_of(first)
        assert data == away / "data"
        assert away.parent == embedded.AWAY_ROOT == Path("/var/lib/workhorse")
        assert away.name == hashlib.sha256(str(first).encode()).hexdigest()[:16]
        assert (away / "home").read_text() == f"{first}\n"  # the place says whose it is
        for directory in (embedded.AWAY_ROOT, away):
            assert (directory.stat().st_uid, mode(directory)) == (0, 0o711)
        assert (data.stat().st_uid, mode(data)) == (user.pw_uid, 0o700)
        # the home keeps its lock and the record of where its data lives; nothing else
        assert sorted(p.name for p in first.iterdir()) == ["lock", "server.json"]
        assert json.loads((first / "server.json").read_text())["data"] == str(data)
        assert {path: mode(path) for path in modes} == modes

        # reused: by this process and by another resolving the same home
        pid = postmaster_pid(first)
        assert embedded.ensure_started(first) == url
        code = f"from workhorse.embedded import ensure_started; print(ensure_started({str(first)!r}))"
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
        assert (other.returncode, other.stdout.strip()) == (0, url), other.stderr
        assert postmaster_pid(first) == pid
        assert postmasters_for(data) == [pid]
        assert embedded.status(first)["running"] is True
        embedded.restart(first, mode="fast")  # the fault drill finds it too
        assert select_one(url) == 1
        assert postmaster_pid(first) != pid
        pid = postmaster_pid(first)
        assert postmasters_for(data) == [pid]  # named by its command line, so stop() finds it

        # another home never shares it, not even with a copy of the first home's server.json
        second.mkdir(parents=True)
        shutil.copy(first / "server.json", second / "server.json")
        second_url = embedded.ensure_started(second)
        assert second_url != url
        assert data_of(second) == embedded._away(second) / "data" != data
        assert select_one(second_url) == 1
        assert select_one(url) == 1

        assert embedded.stop(first) is True
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=2).close()
        assert postmasters_for(data) == []
        assert embedded.status(first)["running"] is False
        assert embedded.stop(first) is False
        assert select_one(second_url) == 1
        assert embedded.stop(second) is True
        assert {path: mode(path) for path in modes} == modes
    finally:
        forget(first)
        forget(second)
        shutil.rmtree(locked)


@root_only
def test_root_copies_pgserver_binaries_the_server_user_cannot_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone under /root/app: ``make demo``'s .venv, and the pgserver binaries in it, are
    out of the server user's reach too; starting a server copies them, once, where it can reach them."""
    real = embedded.find_binaries()
    if real.parts[-3:] != ("pgserver", "pginstall", "bin"):
        pytest.skip("needs the pgserver wheel")
    locked = Path(tempfile.mkdtemp(prefix="workhorse-venv-"))  # 0700, as /root is
    package = locked / "site" / "workhorse_fake_pgserver"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(real.parent, package / "pginstall", symlinks=True, ignore=shutil.ignore_patterns("include"))
    if (libs := real.parents[2] / "pgserver.libs").is_dir():  # the wheel's vendored libraries
        shutil.copytree(libs, locked / "site" / "pgserver.libs")
    monkeypatch.syspath_prepend(str(locked / "site"))
    monkeypatch.setattr(embedded, "PGSERVER_PACKAGE", "workhorse_fake_pgserver")
    monkeypatch.setattr(embedded, "SYSTEM_ROOTS", ())
    monkeypatch.setenv("PATH", str(locked / "empty"))
    h = locked / "app" / ".workhorse"
    copied: Path | None = None
    try:
        with pytest.raises(EmbeddedServerError) as caught:
            embedded.find_binaries()  # looking copies nothing
        assert caught.value.code == "EMBEDDED_BINARIES_MISSING"
        assert f"found in {package / 'pginstall'}, which 'postgres' cannot traverse" in caught.value.cause
        assert embedded.status(h)["binaries"] is None

        url = embedded.ensure_started(h)
        assert select_one(url) == 1
        copied = Path(json.loads((h / "server.json").read_text())["binaries"])
        target = copied.parents[2]
        assert copied.parts[-3:] == ("pgserver", "pginstall", "bin")
        assert target.parent == embedded.AWAY_ROOT
        assert target.name.startswith("pginstall-")
        assert (target.stat().st_uid, mode(target)) == (0, 0o755)
        assert embedded.find_binaries(copy_away=True) == copied  # copied once, then found
        assert not list(embedded.AWAY_ROOT.glob(".pginstall-*"))  # no scratch left behind
        assert embedded.stop(h) is True
        assert mode(locked) == 0o700
    finally:
        forget(h)
        if copied is not None:
            shutil.rmtree(copied.parents[2])
        shutil.rmtree(locked)


@root_only
def test_a_place_naming_another_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two homes whose hashes collided would share a cluster: the place's home file forbids it.
    monkeypatch.setattr(embedded, "AWAY_ROOT", tmp_path / "away")
    h = tmp_path / "locked" / "wh"  # pytest's tmp_path is 0700: the server user cannot reach it
    away = embedded._away(h)
    away.mkdir(parents=True)
    (away / "home").write_text("/somewhere/else/.workhorse\n")

    with pytest.raises(EmbeddedServerError) as caught:
        embedded.ensure_started(h)
    assert caught.value.code == "EMBEDDED_PATH_NOT_TRAVERSABLE"
    assert "belongs to another home" in caught.value.cause
    assert not (away / "data").exists()
    assert embedded.status(h)["data"] is None
    assert embedded.stop(h) is False


@root_only
@pytest.mark.timeout(90)
def test_demo_runs_as_root_from_an_untraversable_directory() -> None:
    """``make demo`` from a fresh ``mktemp -d``: ./.workhorse is out of the server user's reach."""
    cwd = Path(tempfile.mkdtemp(prefix="workhorse-demo-"))
    h = cwd / ".workhorse"
    script = Path(sys.executable).with_name("workhorse")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "workhorse"]
    env = {k: v for k, v in os.environ.items() if k not in ("WORKHORSE_DATABASE_URL", "WORKHORSE_HOME")}
    try:
        done = subprocess.run(
            [*command, "demo"], cwd=cwd, env=env, capture_output=True, text=True, timeout=80, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "DEAD-LETTERED charge_card" in done.stdout
        assert f"its data kept in {embedded._away(h) / 'data'}" in done.stderr  # it says where
        assert embedded.status(h)["running"] is False  # the demo stops the server it started
        assert mode(cwd) == 0o700
        # the first command it suggests shows its dead job (issue 29), from the same directory
        advice = "workhorse --schema workhorse_demo ls --state dead"
        assert advice in done.stdout
        listed = subprocess.run(
            [*command, *advice.split()[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert "charge_card" in listed.stdout and "dead" in listed.stdout
    finally:
        forget(h)
        shutil.rmtree(cwd)


def _account(name: str, uid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, "", f"/home/{name}", "/bin/sh"))


def _users(monkeypatch: pytest.MonkeyPatch, *, euid: int, present: dict[str, int]) -> list[str]:
    """Pretend to run as ``euid`` on a machine whose accounts are ``present``; answers the names asked for."""
    asked: list[str] = []

    def getpwnam(name: str) -> pwd.struct_passwd:
        asked.append(name)
        if name not in present:
            raise KeyError(f"getpwnam(): name not found: {name!r}")
        return _account(name, present[name])

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    return asked


def test_root_without_a_server_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _users(monkeypatch, euid=0, present={"root": 0, "daemon": 1})

    with pytest.raises(EmbeddedServerError) as caught:
        embedded._server_user()
    assert caught.value.code == "EMBEDDED_NO_USER"
    assert caught.value.cause == (
        "running as root, which PostgreSQL refuses, and there is no 'postgres' or 'nobody' user"
    )
    assert caught.value.fix == "useradd --system postgres   # or run as a non-root user"
    assert asked == ["postgres", "nobody"]


def test_root_hands_the_server_to_postgres_else_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    _users(monkeypatch, euid=0, present={"postgres": 999, "nobody": 65534})
    chosen = embedded._server_user()
    assert chosen is not None
    assert (chosen.pw_name, chosen.pw_uid) == ("postgres", 999)

    _users(monkeypatch, euid=0, present={"nobody": 65534})
    chosen = embedded._server_user()
    assert chosen is not None
    assert (chosen.pw_name, chosen.pw_uid) == ("nobody", 65534)


def test_a_non_root_user_runs_the_server_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _users(monkeypatch, euid=1000, present={"postgres": 999, "nobody": 65534})
    assert embedded._server_user() is None
    assert asked == []  # no account is looked up, so a missing one cannot refuse a non-root user
