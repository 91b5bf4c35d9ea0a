"""The embedded PostgreSQL: real servers in per-test homes, always stopped afterwards."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse import embedded
from workhorse.errors import EmbeddedServerError


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        yield tmp_path / "wh"
        embedded.stop(tmp_path / "wh")
        return
    # As root the server runs as an unprivileged user, who cannot traverse pytest's tmp_path:
    # /tmp/pytest-of-root is 0700, and every pytest session on the machine resets it to 0700, so
    # opening it up is racy. A directory of our own under /tmp, traversable by all, is not.
    base = Path(tempfile.mkdtemp(prefix="workhorse-embedded-"))
    base.chmod(0o711)
    try:
        yield base / "wh"
    finally:
        embedded.stop(base / "wh")
        shutil.rmtree(base)


def postmaster_pid(h: Path) -> int:
    return int((h / "data" / "postmaster.pid").read_text().splitlines()[0])


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
    assert not (home / "data.init").exists()
    log = (home / "postgres.log").read_text()
    assert log.count("database system is ready to accept connections") == 1
    assert postmasters_for(home / "data") == [postmaster_pid(home)]


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
    with (home / "data" / "postgresql.conf").open("a") as conf:
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


def test_find_binaries_uses_pgserver_first() -> None:
    pytest.importorskip("pgserver")
    assert embedded.find_binaries().parts[-3:] == ("pgserver", "pginstall", "bin")


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
    assert embedded.home_dir() == tmp_path.resolve() / ".workhorse"
    monkeypatch.setenv("WORKHORSE_HOME", "from-env")
    assert embedded.home_dir() == tmp_path.resolve() / "from-env"
    assert embedded.home_dir("arg") == tmp_path.resolve() / "arg"
    assert embedded.home_dir().is_absolute()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root hands the server over")
def test_root_refuses_an_untraversable_home(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    with pytest.raises(EmbeddedServerError) as caught:
        embedded.ensure_started(locked / "wh")
    assert caught.value.code == "EMBEDDED_PATH_NOT_TRAVERSABLE"
    assert "chmod o+x" in caught.value.fix
    assert not (locked / "wh" / "data").exists()


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
