"""``workhorse backfill ls`` and ``backfill run`` on PostgreSQL: the dry run, --write, --wait beside
a worker subprocess, the deploy gate, and every refusal for a person and with --json."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from bfkit import ROWS, items, passes, table
from click.testing import CliRunner, Result

from workhorse.cli import cli


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["--app", "bfapp:app", "backfill", *args], env={"COLUMNS": "200"}, color=False)


def document(result: Result) -> Any:
    return json.loads(result.stdout)


def refused(result: Result, code: str, exit_code: int = 2) -> dict[str, Any]:
    assert result.exit_code == exit_code, result.output
    error: dict[str, Any] = document(result)["error"]
    assert set(error) == {"code", "cause", "fix"} and error["code"] == code
    return error


def refused_human(result: Result, code: str, exit_code: int = 2) -> None:
    assert result.exit_code == exit_code, result.output
    assert result.stderr.startswith(f"error {code}: "), result.stderr
    assert "\nfix: " in result.stderr


def test_the_dry_run_prints_what_would_change_and_writes_nothing(
    bfapp: ModuleType, database_url: str, schema: str
) -> None:
    before = [table(database_url, schema, t) for t in ("items", "backfill_passes", "jobs")]
    result = invoke("run", "fill-slugs", "--batches", "3")
    assert result.exit_code == 0, result.output
    assert "30 rows in 3 batches" in result.stdout and f"count answers {ROWS} rows" in result.stdout
    assert "nothing was written" in result.stdout
    report = document(invoke("run", "fill-slugs", "--batches", "50", "--json"))
    assert report["dry_run"] and report["finished"] and report["rows"] == ROWS and not report["written"]
    assert [b["rows"] for b in report["batches"]] == [10] * 10 + [0]
    assert [table(database_url, schema, t) for t in ("items", "backfill_passes", "jobs")] == before


def test_write_starts_a_pass_and_the_deploy_gate_follows_it(bfapp: ModuleType, database_url: str, schema: str) -> None:
    gate = invoke("ls", "--pending", "--json")
    error = refused(gate, "BACKFILL_PENDING")
    pending = [b["name"] for b in document(gate)["backfills"]]
    assert pending == ["breaks", "fill-slugs", "needs-app", "needs-ours", "sweeps-nothing"]
    assert "fill-slugs" in error["cause"]
    refused_human(invoke("ls", "--pending"), "BACKFILL_PENDING")
    started = document(invoke("run", "fill-slugs", "--write", "--json"))
    assert started["backfill"] == "fill-slugs" and started["environment"] == "development"
    listed = {b["name"]: b for b in document(invoke("ls", "--json"))["backfills"]}
    latest = listed["fill-slugs"]["latest"]
    assert latest["status"] == "running" and latest["job_id"] == started["job_id"] and latest["job_state"] == "ready"
    assert listed["production-only"]["applies_here"] is False and listed["production-only"]["pending"] is False
    error = refused(invoke("run", "fill-slugs", "--write", "--json"), "BACKFILL_RUNNING")
    assert started["job_id"] in error["cause"]
    human = invoke("ls")
    assert human.exit_code == 0 and "fill-slugs" in human.stdout and "running" in human.stdout


def test_every_refusal_has_code_cause_and_fix(bfapp: ModuleType, database_url: str, schema: str) -> None:
    cases = [
        (("run", "nope"), "BACKFILL_UNKNOWN"),
        (("run", "production-only", "--write"), "BACKFILL_ENVIRONMENT"),
        (("run", "needs-ours"), "BACKFILL_MIGRATION_PENDING"),
        (("run", "needs-app", "--write"), "BACKFILL_MIGRATION_PENDING"),
        (("run", "fill-slugs", "--wait"), "CONFIG_INVALID"),
        (("run", "fill-slugs", "--force"), "CONFIG_INVALID"),
    ]
    for args, code in cases:
        refused(invoke(*args, "--json"), code)
        refused_human(invoke(*args), code)
    assert "declared: breaks, fill-slugs" in refused(invoke("run", "nope", "--json"), "BACKFILL_UNKNOWN")["cause"]
    without_app = CliRunner().invoke(cli, ["backfill", "ls", "--json"])
    refused(without_app, "APP_REQUIRED")
    assert passes(database_url, schema) == []


def test_write_wait_follows_the_pass_to_its_end(bfapp: ModuleType, worker: Any, database_url: str, schema: str) -> None:
    worker("--concurrency", "2")
    result = invoke("run", "fill-slugs", "--write", "--wait")
    assert result.exit_code == 0, result.output
    assert f"completed: {ROWS} rows in {ROWS // 10 + 1} batches" in result.stdout
    assert [hits for _, _, hits in items(database_url, schema)] == [1] * ROWS
    refused_human(invoke("run", "fill-slugs", "--write"), "BACKFILL_APPLIED")
    error = refused(invoke("run", "fill-slugs", "--write", "--json"), "BACKFILL_APPLIED")
    assert error["fix"] == "workhorse backfill run fill-slugs --write --force"
    forced = invoke("run", "fill-slugs", "--write", "--force", "--wait", "--json")
    assert forced.exit_code == 0, forced.output
    final = document(forced)
    assert final["status"] == "completed" and final["forced"] and final["rows"] == ROWS
    assert [p["status"] for p in passes(database_url, schema)] == ["completed", "completed"]
    assert document(invoke("ls", "--pending", "--json"))["backfills"] != []  # others still pending
    stalled = invoke("run", "sweeps-nothing", "--write", "--wait", "--json")
    error = refused(stalled, "BACKFILL_STALLED", exit_code=1)
    assert f"still answers {ROWS} rows" in error["cause"]
    assert passes(database_url, schema)[-1]["status"] == "stalled"
