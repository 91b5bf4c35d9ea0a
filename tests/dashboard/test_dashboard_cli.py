"""`workhorse dashboard` as a user runs it: a real process serving the pages until SIGTERM; the
extra imported only by the command; its refusals when the extra is missing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

from workhorse import App
from workhorse.cli import cli
from workhorse.dashboard import require_extra
from workhorse.errors import ConfigurationError

EXTRA = ("starlette", "jinja2", "uvicorn", "markupsafe")


def test_import_and_help_load_none_of_the_extra() -> None:
    probe = (
        "import sys, workhorse, workhorse.cli\n"
        "from click.testing import CliRunner\n"
        "assert CliRunner().invoke(workhorse.cli.cli, ['--help']).exit_code == 0\n"
        "assert CliRunner().invoke(workhorse.cli.cli, ['dashboard', '--help']).exit_code == 0\n"
        f"print([m for m in {EXTRA!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_missing_extra_is_refused_with_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def without_uvicorn(name: str, *args: Any) -> Any:
        return None if name == "uvicorn" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_uvicorn)
    require_extra()  # the ASGI app needs no server
    with pytest.raises(ConfigurationError) as refused:
        require_extra(server=True)
    assert refused.value.code == "DASHBOARD_EXTRA_MISSING" and "workhorse[dashboard]" in refused.value.fix
    result = CliRunner().invoke(cli, ["dashboard", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "DASHBOARD_EXTRA_MISSING"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.process
def test_the_command_serves_until_sigterm(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)
    app.migrate_sync()
    port = free_port()
    token = "process-token-1"
    env = {**os.environ, "WORKHORSE_DASHBOARD_TOKEN": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "--schema", schema,
         "dashboard", "--bind", f"127.0.0.1:{port}", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        text = ""
        while not text.endswith("}\n"):  # one JSON document, indented
            line = proc.stdout.readline().decode()
            assert line, proc.stderr.read().decode() if proc.stderr else "no output"
            text += line
        started = json.loads(text)
        assert started == {"serving": f"http://127.0.0.1:{port}/", "read_only": False, "token": True}
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = get(f"http://127.0.0.1:{port}/", authorization=f"Bearer {token}")
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never answered"
                time.sleep(0.2)
        assert status == 200 and ">Jobs</a>" in body and "No queue has a job yet" in body
        assert all(f'<th class="num">{state}</th>' in body for state in ("ready", "running", "dead"))
        assert get(f"http://127.0.0.1:{port}/jobs")[0] == 401  # the token from the environment holds
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert b"stopped" not in err  # --json: stdout held the one document; stderr has no chatter
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
