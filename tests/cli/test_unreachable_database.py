"""Every command that talks to PostgreSQL, pointed at a server that is not there: it ends within
seconds with DATABASE_UNAVAILABLE whose cause is PostgreSQL's own reason (not a pool timeout),
and its fix; one JSON document with --json; never a traceback, never the pool's retry log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from clikit import HERE, UNKNOWN_ID, refused, refused_human

from workhorse.cli import cli

# Nothing listens on port 1: the connection is refused at once, so any wait is the CLI's own.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"
PROMPT = 5.0  # seconds: the pool used to retry for its 10 s timeout before giving up


@pytest.fixture
def app_on_unreachable(monkeypatch: pytest.MonkeyPatch, schema: str) -> str:
    """``cliapp`` as a fresh process would import it with the unreachable URL exported; not migrated."""
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", UNREACHABLE)
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "cliapp", raising=False)
    return "cliapp:app"


@pytest.fixture
def cron_app_on_unreachable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, schema: str) -> str:
    """An app with a cron task (so `worker` also runs the scheduler role), on the unreachable URL."""
    name = f"cronapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "import os\n"
        "from workhorse import App\n"
        f"app = App(os.environ['WORKHORSE_DATABASE_URL'], schema={schema!r})\n"
        "@app.task(name='hourly', cron='@hourly', tenant='none')\n"
        "async def hourly(ctx, payload): ...\n"
    )
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", UNREACHABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return f"{name}:app"


def timed(*args: str) -> tuple[Result, float]:
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["--database-url", UNREACHABLE, *args])
    return result, time.monotonic() - started


def assert_names_the_refused_connection(error: dict[str, Any]) -> None:
    assert error["cause"].startswith("PostgreSQL could not be reached or refused the connection: ")
    assert '"127.0.0.1", port 1 failed: Connection refused' in error["cause"], error["cause"]
    assert error["fix"] == 'check the server is up and WORKHORSE_DATABASE_URL is right: psql "$WORKHORSE_DATABASE_URL"'


def assert_no_traceback(result: Result) -> None:
    assert result.exc_info is not None and result.exc_info[0] is SystemExit, result.exc_info
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["ls"],
        ["show", UNKNOWN_ID],
        ["stats"],
        ["workers"],
        ["tasks"],
        ["pause", "emails"],
        ["requeue", "--all", "--state", "dead", "--dry-run"],
        ["metrics"],
        ["migrate"],
    ],
    ids=lambda command: command[0],
)
def test_a_command_on_an_unreachable_database_is_refused_at_once(command: list[str]) -> None:
    result, took = timed(*command, "--json")
    assert took < PROMPT
    error = refused(result, "DATABASE_UNAVAILABLE")  # exit 2, exactly the error document on stdout
    assert_names_the_refused_connection(error)
    assert_no_traceback(result)
    assert "error connecting" not in result.stderr  # the pool never started retrying

    human, took = timed(*command)
    assert took < PROMPT
    refused_human(human, "DATABASE_UNAVAILABLE")  # exit 2, stderr starts with the code: no retry log before it
    assert '"127.0.0.1", port 1 failed: Connection refused' in human.stderr
    assert 'fix: check the server is up and WORKHORSE_DATABASE_URL is right: psql "$WORKHORSE_DATABASE_URL"' in (
        human.stderr
    )
    assert_no_traceback(human)


@pytest.mark.parametrize("role", [["worker", "--burst"], ["worker"]], ids=["burst", "forever"])
def test_a_worker_on_an_unreachable_database_fails_at_once(app_on_unreachable: str, role: list[str]) -> None:
    result, took = timed("--app", app_on_unreachable, *role, "--json")
    assert took < PROMPT
    assert result.exit_code == 1, result.output  # the worker failed (2 is kept for refusals before starting)
    document = json.loads(result.stdout)  # exactly one document: nothing else on stdout
    assert set(document) == {"error"}
    assert set(document["error"]) == {"code", "cause", "fix"}
    assert document["error"]["code"] == "DATABASE_UNAVAILABLE"
    assert_names_the_refused_connection(document["error"])
    assert_no_traceback(result)

    human, took = timed("--app", app_on_unreachable, *role)
    assert took < PROMPT
    assert human.exit_code == 1, human.output
    assert human.stdout == ""
    assert "error DATABASE_UNAVAILABLE: PostgreSQL could not be reached or refused the connection: " in human.stderr
    assert "\nfix: check the server is up" in human.stderr
    assert_no_traceback(human)


@pytest.mark.parametrize("role", ["scheduler", "worker"])
def test_a_scheduler_on_an_unreachable_database_fails_at_once(cron_app_on_unreachable: str, role: str) -> None:
    result, took = timed("--app", cron_app_on_unreachable, role, "--json")
    assert took < PROMPT
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"error"}
    assert document["error"]["code"] == "DATABASE_UNAVAILABLE"
    assert_names_the_refused_connection(document["error"])
    assert_no_traceback(result)


def test_the_worker_process_prints_one_document_and_no_retry_log(schema: str) -> None:
    """The real console process, as a supervisor runs it: stderr is the worker's start line, not the
    connection pool's retries, and it exits 1 within seconds."""
    env = {**os.environ, "WORKHORSE_DATABASE_URL": UNREACHABLE, "WORKHORSE_TEST_SCHEMA": schema}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "workhorse", "--app", "cliapp:app", "worker", "--burst", "--json"],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < PROMPT + 2  # an interpreter's start on top
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert set(document) == {"error"}
    assert document["error"]["code"] == "DATABASE_UNAVAILABLE"
    assert_names_the_refused_connection(document["error"])
    assert "Traceback" not in done.stderr
    assert "error connecting" not in done.stderr, done.stderr
