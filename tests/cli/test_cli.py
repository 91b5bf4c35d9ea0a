"""The command line, in-process through click's runner, against a real PostgreSQL schema per test."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner
from clikit import HERE, UNKNOWN_ID, as_json, invoke, refused

from workhorse._db.migrate import available
from workhorse.cli import cli
from workhorse.ids import short_id

PINNED_KEYS = {
    "id",
    "name",
    "queue",
    "state",
    "attempt",
    "max_attempts",
    "tenant",
    "payload",
    "result",
    "last_error",
    "created_at",
    "run_at",
}
WORKHORSE = [sys.executable, "-m", "workhorse"]


# -- migrate ------------------------------------------------------------------------------------


def test_migrate_applies_once_and_reports_json(database_url: str, schema: str) -> None:
    first = invoke(database_url, schema, "migrate", "--json")
    assert first.exit_code == 0, first.output
    assert as_json(first) == {"applied": [m.version for m in available()], "schema": schema}  # numbers may skip

    again = invoke(database_url, schema, "migrate", "--json")
    assert as_json(again) == {"applied": [], "schema": schema}
    human = invoke(database_url, schema, "migrate")
    assert human.stdout.strip() == f"schema {schema} is up to date"


def test_migrate_sql_prints_the_script_and_applies_nothing(database_url: str, schema: str) -> None:
    result = invoke(database_url, schema, "migrate", "--sql")
    assert result.exit_code == 0, result.output
    assert f"create table if not exists {schema}.jobs" in result.stdout.lower()

    after = invoke(database_url, schema, "ls", "--json")
    assert refused(after, "SCHEMA_NOT_MIGRATED")["fix"].startswith("workhorse migrate")


# -- ls and show --------------------------------------------------------------------------------


def test_ls_json_pages_newest_first(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ids = [cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(5)]

    seen: list[str] = []
    after: list[str] = []
    for _ in range(3):
        result = invoke(database_url, schema, "ls", "--limit", "2", "--json", *after)
        assert result.exit_code == 0, result.output
        page = as_json(result)
        assert set(page) == {"jobs", "next", "prev"}
        for job in page["jobs"]:
            assert set(job) >= PINNED_KEYS
            assert "steps" not in job
            assert job["created_at"].endswith("Z")
        seen += [job["id"] for job in page["jobs"]]
        if page["next"] is None:
            break
        after = ["--after", page["next"]]
    assert seen == list(reversed(ids))
    assert page["next"] is None


def test_ls_filters(database_url: str, schema: str, cliapp: ModuleType) -> None:
    cliapp.add.enqueue_sync({"a": 1, "b": 1})
    loud = cliapp.shout.enqueue_sync({"text": "hi"})

    result = invoke(database_url, schema, "ls", "--queue", "loud", "--state", "ready", "--json")
    assert [job["id"] for job in as_json(result)["jobs"]] == [loud.id]
    none = invoke(database_url, schema, "ls", "--state", "dead", "--json")
    assert as_json(none) == {"jobs": [], "next": None, "prev": None}


def test_ls_human_shows_short_ids_and_the_next_page(database_url: str, schema: str, cliapp: ModuleType) -> None:
    refs = [cliapp.add.enqueue_sync({"a": i, "b": 1}) for i in range(3)]
    delayed = cliapp.add.enqueue_sync({"a": 9, "b": 9}, delay="1h")

    result = CliRunner().invoke(cli, ["--schema", schema, "ls", "--limit", "3"], env={"COLUMNS": "200"}, color=False)
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[1:4]  # the short form every command takes (issue 29)
    assert [row.split()[0] for row in rows] == [short_id(r.id) for r in (delayed, refs[2], refs[1])]
    assert delayed.id not in result.stdout
    assert "delayed" in result.stdout and "in 59m" in result.stdout
    assert f"next page: workhorse --schema {schema} ls --limit 3 --after {refs[1].id}" in result.stdout


def test_ls_limit_out_of_range_is_refused(database_url: str, schema: str, cliapp: ModuleType) -> None:
    result = invoke(database_url, schema, "ls", "--limit", "500", "--json")
    assert "200" in refused(result, "PAGE_LIMIT_INVALID")["cause"]

    human = invoke(database_url, schema, "ls", "--limit", "500")
    assert human.exit_code == 2
    assert human.stdout == ""
    assert human.stderr.startswith("error PAGE_LIMIT_INVALID: ")
    assert "\nfix: " in human.stderr


def test_show_json_has_the_pinned_keys(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ref = cliapp.add.enqueue_sync({"a": 2, "b": 3}, key="k-1")

    result = invoke(database_url, schema, "show", ref.id, "--json")
    assert result.exit_code == 0, result.output
    job = as_json(result)
    assert PINNED_KEYS | {"steps"} <= set(job)
    assert job["id"] == ref.id
    assert job["name"] == "cli.add"
    assert job["state"] == "ready"
    assert job["payload"] == {"a": 2, "b": 3}
    assert job["steps"] == []
    assert (job["attempt"], job["max_attempts"], job["tenant"]) == (0, 5, None)

    human = invoke(database_url, schema, "show", ref.id)
    assert human.exit_code == 0, human.output
    assert ref.id in human.stdout and '"a": 2' in human.stdout


def test_show_unknown_id_is_refused(database_url: str, schema: str, cliapp: ModuleType) -> None:
    refused(invoke(database_url, schema, "show", UNKNOWN_ID, "--json"), "JOB_NOT_FOUND")
    refused(invoke(database_url, schema, "show", "not-an-id", "--json"), "JOB_NOT_FOUND")


# -- the operator verbs -------------------------------------------------------------------------


def test_cancel_then_requeue_then_rm(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ref = cliapp.add.enqueue_sync({"a": 1, "b": 1})

    cancelled = invoke(database_url, schema, "cancel", ref.id, "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert as_json(cancelled)["state"] == "cancelled"

    requeued = invoke(database_url, schema, "requeue", ref.id)
    assert requeued.exit_code == 0, requeued.output
    assert requeued.stdout.startswith(f"requeued {short_id(ref.id)} (cli.add)")

    removed = invoke(database_url, schema, "rm", ref.id, "--json")
    assert removed.exit_code == 0, removed.output
    document = as_json(removed)
    assert set(document) == {"removed"}
    assert document["removed"]["id"] == ref.id
    refused(invoke(database_url, schema, "show", ref.id, "--json"), "JOB_NOT_FOUND")


def test_promote_makes_a_delayed_job_due(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ref = cliapp.add.enqueue_sync({"a": 1, "b": 1}, delay="1h")

    result = invoke(database_url, schema, "promote", ref.id, "--json")
    assert result.exit_code == 0, result.output
    assert as_json(result)["state"] == "ready"
    human = invoke(database_url, schema, "cancel", ref.id)
    assert human.stdout.startswith(f"cancelled {short_id(ref.id)} (cli.add)")


def test_verbs_refuse_by_state(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ref = cliapp.add.enqueue_sync({"a": 1, "b": 1})
    worked = invoke(database_url, schema, "--app", "cliapp:app", "worker", "--burst")
    # --schema is the app's own here, so it is accepted
    assert worked.exit_code == 0, worked.output

    refused(invoke(database_url, schema, "cancel", ref.id, "--json"), "JOB_NOT_CANCELLABLE")
    refused(invoke(database_url, schema, "promote", ref.id, "--json"), "JOB_NOT_PROMOTABLE")
    live = cliapp.add.enqueue_sync({"a": 1, "b": 1})
    refused(invoke(database_url, schema, "requeue", live.id, "--json"), "JOB_NOT_REQUEUEABLE")

    human = invoke(database_url, schema, "cancel", ref.id)
    assert human.exit_code == 2
    assert human.stderr.startswith("error JOB_NOT_CANCELLABLE: ")


@pytest.mark.parametrize("verb", ["cancel", "requeue", "promote", "rm"])
def test_verbs_refuse_an_unknown_id(database_url: str, schema: str, cliapp: ModuleType, verb: str) -> None:
    error = refused(invoke(database_url, schema, verb, UNKNOWN_ID, "--json"), "JOB_NOT_FOUND")
    assert UNKNOWN_ID in error["cause"]


# -- the worker and --app -----------------------------------------------------------------------


def test_worker_burst_runs_the_apps_jobs(database_url: str, schema: str, cliapp: ModuleType) -> None:
    refs = [cliapp.add.enqueue_sync({"a": i, "b": 10}) for i in range(3)]
    shouted = cliapp.shout.enqueue_sync({"text": "hi"})

    result = CliRunner().invoke(
        cli, ["--app", "cliapp:app", "worker", "--burst", "--concurrency", "default=2,loud=1", "--json"]
    )
    assert result.exit_code == 0, result.output
    stats = as_json(result)
    assert stats["claimed"] == 4
    assert stats["completed"] == 4

    for ref, expected in [*((r, i + 10) for i, r in enumerate(refs)), (shouted, "HI")]:
        job = as_json(invoke(database_url, schema, "show", ref.id, "--json"))
        assert (job["state"], job["result"]) == ("done", expected)


def test_worker_reads_the_app_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, database_url: str, schema: str, cliapp: ModuleType
) -> None:
    monkeypatch.setenv("WORKHORSE_APP", "cliapp:app")
    ref = cliapp.shout.enqueue_sync({"text": "env"})

    result = CliRunner().invoke(cli, ["worker", "--burst", "--queues", "loud", "--visibility-timeout", "10"])
    assert result.exit_code == 0, result.output
    assert as_json(invoke(database_url, schema, "show", ref.id, "--json"))["result"] == "ENV"


def test_worker_without_app_is_refused(database_url: str, schema: str) -> None:
    error = refused(invoke(database_url, schema, "worker", "--burst", "--json"), "APP_REQUIRED")
    assert "--app" in error["fix"] and "WORKHORSE_APP" in error["fix"]

    human = invoke(database_url, schema, "worker")
    assert human.exit_code == 2
    assert human.stderr.startswith("error APP_REQUIRED: ")


def test_a_module_alone_names_its_app(cliapp: ModuleType) -> None:
    """`--app cliapp` is `--app cliapp:app` (issue 16)."""
    cliapp.add.enqueue_sync({"a": 1, "b": 2})
    result = CliRunner().invoke(cli, ["--app", "cliapp", "worker", "--burst", "--json"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ("no_such_module_here:app", "APP_NOT_FOUND"),
        ("cliapp:nope", "APP_NOT_FOUND"),
        ("cliapp:", "APP_INVALID"),
        ("cliapp:add", "APP_INVALID"),
    ],
)
def test_bad_app_is_refused(cliapp: ModuleType, spec: str, code: str) -> None:
    result = CliRunner().invoke(cli, ["--app", spec, "worker", "--burst", "--json"])
    error = refused(result, code)
    assert spec in error["cause"]


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("raise RuntimeError('boom')", "APP_IMPORT_FAILED"),
        ("import no_such_dependency_here", "APP_IMPORT_FAILED"),
        ("from workhorse import App\napp = App()\n@app.job\ndef untenanted(ctx, p): ...", "JOB_TENANT_REQUIRED"),
    ],
)
def test_an_app_module_that_fails_to_import_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str, code: str
) -> None:
    name = f"broken_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    result = CliRunner().invoke(cli, ["--app", f"{name}:app", "ls", "--json"])
    refused(result, code)


def test_app_with_another_schema_is_refused(database_url: str, cliapp: ModuleType) -> None:
    result = invoke(database_url, "elsewhere", "--app", "cliapp:app", "ls", "--json")
    assert "elsewhere" in refused(result, "APP_OPTION_CONFLICT")["cause"]


def test_worker_option_syntax_is_a_usage_error(cliapp: ModuleType) -> None:
    result = CliRunner().invoke(cli, ["--app", "cliapp:app", "worker", "--burst", "--concurrency", "lots"])
    assert result.exit_code == 2
    assert "--concurrency" in result.stderr


def test_worker_option_values_are_refused_by_the_library(cliapp: ModuleType) -> None:
    result = CliRunner().invoke(
        cli, ["--app", "cliapp:app", "worker", "--burst", "--visibility-timeout", "soon", "--json"]
    )
    assert "visibility_timeout" in refused(result, "CONFIG_INVALID")["cause"]


# -- db, help -----------------------------------------------------------------------------------


def test_db_url_reports_the_database_in_use(database_url: str) -> None:
    result = CliRunner().invoke(cli, ["db", "url", "--json"])
    assert result.exit_code == 0, result.output
    assert as_json(result) == {"url": database_url}

    explicit = CliRunner().invoke(cli, ["--database-url", "postgresql://elsewhere/db", "db", "url"])
    assert explicit.stdout == "postgresql://elsewhere/db\n"


def test_db_status_and_stop_on_an_empty_home(tmp_path: Path) -> None:
    status = CliRunner().invoke(cli, ["db", "status", "--json"])
    assert status.exit_code == 0, status.output
    info = as_json(status)
    assert info["home"] == str(tmp_path / "home")
    assert info["running"] is False

    stopped = CliRunner().invoke(cli, ["db", "stop", "--json"])
    assert as_json(stopped) == {"stopped": False, "home": str(tmp_path / "home")}


def test_help_lists_every_command_with_an_example() -> None:
    root = CliRunner().invoke(cli, ["--help"])
    assert root.exit_code == 0
    commands = ["migrate", "worker", "ls", "show", "cancel", "requeue", "promote", "rm", "db", "demo"]
    for name in commands:
        assert f"\n  {name} " in root.stdout
    for name in [c for c in commands if c != "db"]:
        text = CliRunner().invoke(cli, [name, "--help"]).stdout
        assert "Example" in text, name


def test_a_stuck_sync_body_cannot_hold_the_worker_process(database_url: str, schema: str, cliapp: ModuleType) -> None:
    """SIGTERM drains; at the cut-off the body's thread is still sleeping, and the process leaves anyway."""
    ref = cliapp.stuck.enqueue_sync({"seconds": 60})
    worker = subprocess.Popen(
        [*WORKHORSE, "--app", "cliapp:app", "worker", "--queues", "stuck", "--drain-timeout", "0.2"],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while as_json(invoke(database_url, schema, "show", ref.id, "--json"))["state"] != "running":
            assert time.monotonic() < deadline, "the worker never started the job"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=10)
    finally:
        worker.kill()
    assert worker.returncode == 0, stderr
    assert "still running after the drain" in stderr
    assert as_json(invoke(database_url, schema, "show", ref.id, "--json"))["state"] == "ready"


# -- workers ------------------------------------------------------------------------------------


def test_workers_lists_the_live_registry(database_url: str, schema: str) -> None:

    from workhorse import App
    from workhorse.types import WorkerInfo

    assert invoke(database_url, schema, "migrate").exit_code == 0
    assert as_json(invoke(database_url, schema, "workers", "--json")) == {"workers": []}
    assert "no live workers" in invoke(database_url, schema, "workers").stdout

    async def register() -> None:
        app = App(database_url, schema=schema)
        info = WorkerInfo(id="w-cli", host="box", pid=42, queues=["emails"], concurrency={"emails": 5})
        await app.driver.register_worker(info, ttl=30)
        await app.close()

    asyncio.run(register())
    (row,) = as_json(invoke(database_url, schema, "workers", "--json"))["workers"]
    assert (row["id"], row["host"], row["pid"], row["queues"], row["concurrency"]) == (
        "w-cli",
        "box",
        42,
        ["emails"],
        {"emails": 5},
    )
    assert row["started_at"].endswith("Z") and row["last_seen_at"].endswith("Z")
    human = invoke(database_url, schema, "workers")
    assert "w-cli" in human.stdout and "emails(5)" in human.stdout


def test_scheduler_without_tasks_is_refused(database_url: str, schema: str, cliapp: ModuleType) -> None:
    result = CliRunner().invoke(
        cli, ["--database-url", database_url, "--schema", schema, "--app", "cliapp:app", "scheduler"]
    )
    assert result.exit_code == 2, result.output
    assert "SCHEDULER_NO_TASKS" in result.output


def test_the_root_options_are_taken_after_the_command_too(database_url: str, schema: str, cliapp: ModuleType) -> None:
    """`workhorse ls --database-url URL --schema S` is `workhorse --database-url URL --schema S ls`
    (issue 16), in both spellings of an option; what follows `--` stays where it is."""
    from workhorse.cli.main import hoisted

    ref = cliapp.add.enqueue_sync({"a": 1, "b": 2})
    for args in (
        ["ls", "--json", "--database-url", database_url, "--schema", schema],
        ["ls", f"--database-url={database_url}", "--json", f"--schema={schema}"],
        ["--database-url", database_url, "ls", "--schema", schema, "--json"],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
        assert [job["id"] for job in json.loads(result.stdout)["jobs"]] == [ref.id]
    assert hoisted(["show", "x", "--", "--app", "y"]) == ["show", "x", "--", "--app", "y"]
    assert hoisted(["--app", "m", "worker", "--burst"]) == ["--app", "m", "worker", "--burst"]


def test_worker_logs_one_json_line_per_outcome(cliapp: ModuleType) -> None:
    """`worker --log-format json`: every stderr line is a JSON object; each job's outcome is one,
    with its fields as keys. `--log-level warning` drops them (issue 16). A subprocess: in-process,
    pytest's own log handlers would stand for an app's logging configuration."""
    ids = {cliapp.add.enqueue_sync({"a": 1, "b": i}).id for i in range(3)}
    command = [sys.executable, "-m", "workhorse", "--app", "cliapp:app", "worker", "--burst"]
    done = subprocess.run(
        [*command, "--log-format", "json"], check=False, cwd=HERE, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    outcomes = [line for line in lines if line.get("outcome") == "done"]
    assert {line["job_id"] for line in outcomes} == ids
    assert all(line["job"] == "cli.add" and line["level"] == "INFO" and "duration_ms" in line for line in outcomes)
    cliapp.add.enqueue_sync({"a": 1, "b": 9})
    quiet = subprocess.run(
        [*command, "--log-level", "warning"], check=False, cwd=HERE, capture_output=True, text=True, timeout=60
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "completed" not in quiet.stderr


def test_stats_since_past_the_bound_is_refused(database_url: str, schema: str) -> None:
    assert invoke(database_url, schema, "migrate").exit_code == 0
    refused(invoke(database_url, schema, "stats", "--since", "99999999d", "--json"), "STATS_WINDOW_TOO_LONG")
