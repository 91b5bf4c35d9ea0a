"""``workhorse metrics``: printed once (text and --json), served until SIGTERM, and its refusals."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

from workhorse import App, JobContext
from workhorse.cli import cli
from workhorse.cli.metrics import parse_address


async def invoke(database_url: str, schema: str, *args: str) -> Result:
    """The command runs its own event loop (asyncio.run): off this test's loop, on a thread."""
    argv = ["--database-url", database_url, "--schema", schema, "metrics", *args]
    return await asyncio.to_thread(CliRunner().invoke, cli, argv)


async def enqueue_two(app: App) -> None:
    @app.job(name="hello", tenant="none")
    async def hello(ctx: JobContext, payload: object) -> None:
        return None

    await hello.enqueue(1)
    await hello.enqueue(2, delay="1h")


async def test_prints_the_exposition_once(pg_app: App, database_url: str) -> None:
    await enqueue_two(pg_app)
    result = await invoke(database_url, pg_app.schema)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "workhorse_up 1.0" in lines
    assert 'workhorse_jobs{name="hello",queue="default",state="ready"} 1.0' in lines
    assert 'workhorse_jobs{name="hello",queue="default",state="delayed"} 1.0' in lines
    assert 'workhorse_queue_paused{queue="default"} 0.0' in lines
    assert {f.name for f in text_string_to_metric_families(result.stdout)} >= {"workhorse_jobs", "workhorse_workers"}


async def test_json_is_one_document_of_the_same_samples(pg_app: App, database_url: str) -> None:
    await enqueue_two(pg_app)
    await pg_app.admin.pause("default")
    result = await invoke(database_url, pg_app.schema, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    by_name = {m["name"]: m for m in document["metrics"]}
    assert by_name["workhorse_up"] == {
        "name": "workhorse_up",
        "type": "gauge",
        "help": by_name["workhorse_up"]["help"],
        "samples": [{"labels": {}, "value": 1}],
    }
    assert {"labels": {"queue": "default", "name": "hello", "state": "delayed"}, "value": 1} in by_name[
        "workhorse_jobs"
    ]["samples"]
    assert by_name["workhorse_queue_paused"]["samples"] == [{"labels": {"queue": "default"}, "value": 1}]
    assert by_name["workhorse_jobs_completed_total"]["type"] == "counter"


@pytest.mark.parametrize("address", ["nope", "9464", "host:", ":65536", "[::1]9464", "a b:80", ":-1"])
def test_a_bad_address_is_refused(address: str) -> None:
    result = CliRunner().invoke(cli, ["metrics", "--serve", address, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "METRICS_ADDRESS_INVALID"
    assert repr(address) in error["cause"] and "--serve :9464" in error["fix"]


def test_addresses_read() -> None:
    assert parse_address(":9464") == ("0.0.0.0", 9464)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9100") == ("::1", 9100)
    assert parse_address("metrics.local:80") == ("metrics.local", 80)


def test_a_busy_port_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["metrics", "--serve", f"127.0.0.1:{port}"])
    assert result.exit_code == 2
    assert "METRICS_BIND_FAILED" in result.stderr and f"127.0.0.1:{port}" in result.stderr


def test_a_bad_timeout_is_refused() -> None:
    result = CliRunner().invoke(cli, ["metrics", "--serve", ":0", "--timeout", "soon", "--json"])
    assert result.exit_code == 2
    assert "--timeout" in json.loads(result.stdout)["error"]["cause"]


def test_serve_runs_until_sigterm(database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    program = textwrap.dedent(
        """
        from workhorse.cli import main
        main()
        """
    )
    args = ["--database-url", database_url, "--schema", schema, "metrics", "--serve", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", program, *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", first)
        assert found, first
        with urllib.request.urlopen(found.group(0), timeout=10) as response:
            text = response.read().decode()
        assert "workhorse_up 1.0" in text.splitlines()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "stopped" in err


def test_printed_once_a_database_that_is_down_is_a_refusal() -> None:
    """Served, a failed scrape is `workhorse_up 0`; printed once it is a refusal like any command's
    (a cron job writing a textfile must not write a file that looks fine)."""
    down = "postgresql://postgres@127.0.0.1:1/x"
    result = CliRunner().invoke(cli, ["--database-url", down, "metrics", "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["code"] == "DATABASE_UNAVAILABLE"
