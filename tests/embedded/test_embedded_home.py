"""Issue 29: one embedded database per project, found from anywhere inside it; read-only commands
never create one; a test session stops the server it started; a server whose home was removed is
stopped by the next ``workhorse db`` command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from workhorse.cli import cli
from workhorse.embedded import server as embedded
from workhorse.errors import EmbeddedServerError

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory the server user can reach (as root), with no embedded URL in the
    environment: what a shell in a fresh checkout sees."""
    base = Path(tempfile.mkdtemp(prefix="workhorse-project-"))
    base.chmod(0o711)
    monkeypatch.delenv("WORKHORSE_DATABASE_URL", raising=False)
    monkeypatch.delenv("WORKHORSE_HOME", raising=False)
    monkeypatch.delenv("WORKHORSE_APP", raising=False)
    try:
        yield base / "app"
    finally:
        embedded.stop(base / "app" / ".workhorse")
        shutil.rmtree(base)


def unrelated_ancestors(path: Path) -> bool:
    """Whether no directory above ``path`` holds a ``.workhorse`` of someone else's."""
    return not any((parent / ".workhorse").is_dir() for parent in path.parents)


def test_the_home_is_the_nearest_workhorse_directory_upward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKHORSE_HOME", raising=False)
    project = tmp_path / "app"
    deeper = project / "src" / "pkg"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    if unrelated_ancestors(tmp_path):
        assert embedded.home_dir() == deeper.resolve() / ".workhorse"  # none anywhere: where one would be made
    (project / ".workhorse").mkdir()
    assert embedded.home_dir() == project.resolve() / ".workhorse"  # as git finds .git
    (deeper / ".workhorse").mkdir()
    assert embedded.home_dir() == deeper.resolve() / ".workhorse"  # the nearest wins
    monkeypatch.setenv("WORKHORSE_HOME", str(tmp_path / "elsewhere"))
    assert embedded.home_dir() == tmp_path.resolve() / "elsewhere"  # the variable still decides first


def test_ensure_started_without_create_refuses_a_home_with_no_database(tmp_path: Path) -> None:
    h = tmp_path / "wh"
    with pytest.raises(EmbeddedServerError) as caught:
        embedded.ensure_started(h, create=False)
    assert caught.value.code == "EMBEDDED_NOT_FOUND"
    assert str(h) in caught.value.cause and "workhorse migrate" in caught.value.fix
    assert not h.exists()  # nothing made, not even the home


def cli_in(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.timeout(120)
def test_read_only_commands_use_the_projects_database_from_a_subdirectory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cd sub && workhorse ls`` reads the project's database; it never runs initdb in ``sub``."""
    sub = project / "src" / "sub"
    sub.mkdir(parents=True)
    if not unrelated_ancestors(project):
        pytest.skip(f"a .workhorse above {project} would be found first")
    code, out, err = cli_in(project, monkeypatch, "migrate", "--json")
    assert code == 0, out + err
    assert (project / ".workhorse" / "server.json").exists()

    monkeypatch.setattr(embedded, "_announced", set())  # as a new process: it says which database it uses
    code, out, err = cli_in(sub, monkeypatch, "ls", "--json")
    assert code == 0, out + err
    assert json.loads(out)["jobs"] == []
    assert f"under {project / '.workhorse'}" in err  # it says which database it uses
    code, out, err = cli_in(sub, monkeypatch, "stats", "--json")
    assert code == 0, out + err
    assert not (sub / ".workhorse").exists()
    assert not (project / "src" / ".workhorse").exists()

    # stopped, the project's server is started again by a read-only command: that is not creating
    embedded.stop(project / ".workhorse")
    code, out, err = cli_in(sub, monkeypatch, "ls", "--json")
    assert code == 0, out + err
    assert embedded.status(project / ".workhorse")["running"] is True


def test_read_only_commands_refuse_to_create_a_database(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = project / "not-a-project"
    elsewhere.mkdir(parents=True)
    if not unrelated_ancestors(project):
        pytest.skip(f"a .workhorse above {project} would be found first")
    for command in (["ls"], ["show", "0190f1c2"], ["stats"], ["tasks"], ["workers"], ["db", "url"]):
        code, out, _ = cli_in(elsewhere, monkeypatch, *command, "--json")
        assert code == 2, (command, out)
        error = json.loads(out)["error"]
        assert error["code"] == "EMBEDDED_NOT_FOUND", (command, error)
        assert f"in {elsewhere.resolve()} or any directory above it" in error["cause"]
        assert "workhorse migrate" in error["fix"]
        assert not (elsewhere / ".workhorse").exists(), command
    # a person's view: the code, the cause, the fix
    code, out, err = cli_in(elsewhere, monkeypatch, "ls")
    assert code == 2 and out == ""
    assert err.startswith("error EMBEDDED_NOT_FOUND: no embedded PostgreSQL: no .workhorse directory")


@pytest.mark.skipif(not AS_ROOT, reason="only root keeps clusters away from their homes")
@pytest.mark.timeout(120)
def test_the_next_db_command_stops_the_server_of_a_removed_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone deleted while its server (kept in /var/lib/workhorse) runs: `workhorse db status`
    notices, stops it, and says where its data is and how to delete it."""
    locked = Path(tempfile.mkdtemp(prefix="workhorse-clone-"))  # 0700, as mktemp -d makes it
    h = locked / "c" / ".workhorse"
    away = embedded._away(h)
    data = away / "data"
    pid = 0
    try:
        embedded.ensure_started(h)
        pid = int((data / "postmaster.pid").read_text().split()[0])
        shutil.rmtree(locked)  # the clone is deleted; its server runs on
        assert embedded._is_postmaster(pid, data)

        monkeypatch.setenv("WORKHORSE_HOME", str(Path(tempfile.gettempdir()) / "workhorse-no-such-home"))
        result = CliRunner().invoke(cli, ["db", "status", "--json"])
        assert result.exit_code == 0, result.output
        orphans = [o for o in json.loads(result.stdout)["orphans"] if o["home"] == str(h)]
        assert orphans == [{"home": str(h), "data": str(data), "running": None, "remove": f"rm -r {away}",
                            "stopped": True}]  # fmt: skip
        assert not embedded._is_postmaster(pid, data)
        assert data.is_dir()  # data kept
        assert f"stopped the embedded PostgreSQL of {h}, which no longer exists" in result.stderr

        result = CliRunner().invoke(cli, ["db", "status"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert f"{h} is gone; its server: stopped; its data: {data} (delete: rm -r {away})" in result.stdout
        assert "every `workhorse db` command stops them" in result.stdout
    finally:
        if pid and embedded._is_postmaster(pid, data):  # whatever failed above, no server is left behind
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + 30
            while embedded._is_postmaster(pid, data) and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(away, ignore_errors=True)
        shutil.rmtree(locked, ignore_errors=True)


SESSION_TEST = """
def test_uses_the_database(pg_app):
    assert pg_app.migrate_sync() == []
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("already_running", [False, True])
def test_a_test_session_stops_the_server_it_started(already_running: bool) -> None:
    """``make test`` without WORKHORSE_DATABASE_URL (pytest-xdist, two workers): the embedded
    server the session started is stopped when it ends; one that was running before is kept."""
    base = Path(tempfile.mkdtemp(prefix="workhorse-session-"))
    base.chmod(0o711)
    project = base / "project"
    project.mkdir()
    (project / "test_one.py").write_text(textwrap.dedent(SESSION_TEST))
    (project / "test_two.py").write_text(textwrap.dedent(SESSION_TEST))
    h = project / ".workhorse"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKHORSE_") and not k.startswith("PYTEST_")}
    try:
        if already_running:
            embedded.ensure_started(h)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-c", "/dev/null",
             "--rootdir", str(project), str(project)],
            cwd=project, env=env, capture_output=True, text=True, timeout=200, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 passed" in done.stdout
        assert embedded.status(h)["data"] is not None  # the session did use (or make) this home's server
        assert embedded.status(h)["running"] is already_running
    finally:
        embedded.stop(h)
        shutil.rmtree(embedded._away(h), ignore_errors=True)
        shutil.rmtree(base)
