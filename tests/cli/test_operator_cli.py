"""The operator surface on the command line: ls filters and both page links, show's progress and
errors, the bulk verbs (--all), pause/resume and stats; every refusal, with its code."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner
from clikit import UNKNOWN_ID, as_json, human, invoke, refused, refused_human

from workhorse.cli import cli
from workhorse.ids import short_id


def work(queue: str) -> None:
    """Run the app's worker once over ``queue`` (``--burst``: until nothing there is due)."""
    result = CliRunner().invoke(cli, ["--app", "cliapp:app", "worker", "--burst", "--queues", queue, "--json"])
    assert result.exit_code == 0, result.output


def dead_jobs(cliapp: ModuleType, count: int) -> list[str]:
    ids = [cliapp.boom.enqueue_sync({"terminal": True, "n": i}).id for i in range(count)]
    work("boom")
    return ids


def listed(database_url: str, schema: str, *args: str) -> list[str]:
    result = invoke(database_url, schema, "ls", "--json", *args)
    assert result.exit_code == 0, result.output
    return [job["id"] for job in as_json(result)["jobs"]]


def page(database_url: str, schema: str, *args: str) -> dict[str, Any]:
    result = invoke(database_url, schema, "ls", "--json", *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = as_json(result)
    assert set(document) == {"jobs", "next", "prev"}
    return document


def shown(database_url: str, schema: str, job_id: str) -> dict[str, Any]:
    result = invoke(database_url, schema, "show", job_id, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = as_json(result)
    return document


def states(database_url: str, schema: str) -> dict[str, tuple[str, int]]:
    """Every job's (state, attempt), to show a refused call changed nothing."""
    return {
        job["id"]: (job["state"], job["attempt"])
        for job in as_json(invoke(database_url, schema, "ls", "--json", "--limit", "200"))["jobs"]
    }


# -- ls -----------------------------------------------------------------------------------------


def test_ls_pages_both_ways(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ids = [cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(5)]
    newest = list(reversed(ids))

    first = page(database_url, schema, "--limit", "2")
    assert [j["id"] for j in first["jobs"]] == newest[0:2]
    assert (first["next"], first["prev"]) == (newest[1], None)

    second = page(database_url, schema, "--limit", "2", "--after", first["next"])
    assert [j["id"] for j in second["jobs"]] == newest[2:4]
    assert (second["next"], second["prev"]) == (newest[3], newest[2])

    last = page(database_url, schema, "--limit", "2", "--after", second["next"])
    assert [j["id"] for j in last["jobs"]] == newest[4:]
    assert (last["next"], last["prev"]) == (None, newest[4])

    back = page(database_url, schema, "--limit", "2", "--before", last["prev"])
    assert [j["id"] for j in back["jobs"]] == newest[2:4]
    assert (back["next"], back["prev"]) == (newest[3], newest[2])

    top = page(database_url, schema, "--limit", "2", "--before", back["prev"])
    assert [j["id"] for j in top["jobs"]] == newest[0:2]
    assert top["next"] == newest[1]


def test_ls_human_footer_names_the_previous_and_next_page(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ids = [cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(5)]

    result = human(schema, "ls", "--queue", "default", "--limit", "2", "--after", ids[3])
    assert result.exit_code == 0, result.output
    assert ids[2] in result.stdout and ids[1] in result.stdout and ids[3] not in result.stdout
    assert f"previous page: workhorse --schema {schema} ls --queue default --limit 2 --before {ids[2]}" in result.stdout
    assert f"next page: workhorse --schema {schema} ls --queue default --limit 2 --after {ids[1]}" in result.stdout

    first = human(schema, "ls", "--limit", "2")
    assert "previous page" not in first.stdout
    assert f"next page: workhorse --schema {schema} ls --limit 2 --after {ids[3]}" in first.stdout


def test_ls_id_prefix(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ids = [cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(3)]

    assert listed(database_url, schema, "--id-prefix", ids[1][:23]) == [ids[1]]  # with its dashes
    assert listed(database_url, schema, "--id-prefix", ids[1].replace("-", "")[:20].upper()) == [ids[1]]
    assert listed(database_url, schema, "--id-prefix", ids[1]) == [ids[1]]
    assert listed(database_url, schema, "--id-prefix", "ffffffffffff") == []

    error = refused(invoke(database_url, schema, "ls", "--id-prefix", "xyz", "--json"), "ID_PREFIX_INVALID")
    assert "xyz" in error["cause"]
    refused(invoke(database_url, schema, "ls", "--id-prefix", "0" * 33, "--json"), "ID_PREFIX_INVALID")
    refused_human(invoke(database_url, schema, "ls", "--id-prefix", "xyz"), "ID_PREFIX_INVALID")


def test_ls_created_range(database_url: str, schema: str, cliapp: ModuleType) -> None:
    a, b, c = (cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(3))
    b_at = shown(database_url, schema, b)["created_at"]
    c_at = shown(database_url, schema, c)["created_at"]
    assert b_at.endswith("Z")

    assert listed(database_url, schema, "--created-from", b_at) == [c, b]  # inclusive
    assert listed(database_url, schema, "--created-to", b_at) == [a]  # exclusive
    assert listed(database_url, schema, "--created-from", b_at, "--created-to", c_at) == [b]
    naive = b_at.removesuffix("Z")
    assert listed(database_url, schema, "--created-from", naive) == [c, b]  # naive is UTC
    plus_two = datetime.fromisoformat(b_at).astimezone(timezone(timedelta(hours=2))).isoformat()
    assert "+02:00" in plus_two
    assert listed(database_url, schema, "--created-from", plus_two) == [c, b]
    assert listed(database_url, schema, "--created-from", "1h") == [c, b, a]  # that long ago
    assert listed(database_url, schema, "--created-to", "1h") == []
    assert listed(database_url, schema, "--created-from", "2h", "--created-to", "1h") == []


def test_ls_created_from_a_duration_pins_the_instant_in_the_footer(
    database_url: str, schema: str, cliapp: ModuleType
) -> None:
    ids = [cliapp.add.enqueue_sync({"a": i, "b": 1}).id for i in range(2)]

    result = human(schema, "ls", "--created-from", "1h", "--limit", "1")
    assert result.exit_code == 0, result.output
    footer = re.search(r"next page: (.*)", result.stdout)
    assert footer is not None
    # the next page must be the same query an hour from now: the instant, not "1h"
    assert re.fullmatch(
        rf"workhorse --schema {schema} ls --created-from \d{{4}}-\d\d-\d\dT[\d:.]+Z --limit 1 --after {ids[1]}",
        footer.group(1).strip(),
    ), footer.group(1)


@pytest.mark.parametrize("value", ["yesterday", "-5m", "2026-13-01", "5 parsecs"])
def test_ls_refuses_a_time_it_cannot_read(database_url: str, schema: str, cliapp: ModuleType, value: str) -> None:
    error = refused(invoke(database_url, schema, "ls", "--created-from", value, "--json"), "TIME_INVALID")
    assert "--created-from" in error["cause"] and repr(value) in error["cause"]
    assert error["fix"].startswith("workhorse ls --created-from ")
    refused(invoke(database_url, schema, "ls", "--created-to", value, "--json"), "TIME_INVALID")
    refused_human(invoke(database_url, schema, "ls", "--created-to", value), "TIME_INVALID")


def test_ls_refuses_bad_cursors(database_url: str, schema: str, cliapp: ModuleType) -> None:
    ref = cliapp.add.enqueue_sync({"a": 1, "b": 1})

    both = invoke(database_url, schema, "ls", "--after", ref.id, "--before", ref.id, "--json")
    refused(both, "PAGE_CURSOR_INVALID")
    for option in ("--after", "--before"):
        for cursor in ("not-a-cursor", UNKNOWN_ID + "0"):
            error = refused(invoke(database_url, schema, "ls", option, cursor, "--json"), "PAGE_CURSOR_INVALID")
            assert cursor in error["cause"]
    refused_human(invoke(database_url, schema, "ls", "--before", "not-a-cursor"), "PAGE_CURSOR_INVALID")
    # A well-formed id no job has is a position, not a refusal (older than every job here).
    assert page(database_url, schema, "--after", UNKNOWN_ID)["jobs"] == []
    assert [j["id"] for j in page(database_url, schema, "--before", UNKNOWN_ID)["jobs"]] == [ref.id]


# -- progress and errors ------------------------------------------------------------------------


def test_show_and_ls_print_progress_and_the_attempts_errors(database_url: str, schema: str, cliapp: ModuleType) -> None:
    reported = cliapp.progress.enqueue_sync({})
    work("slow")
    flaky = cliapp.boom.enqueue_sync({})
    work("boom")  # attempt 1 fails; the retry waits an hour
    assert invoke(database_url, schema, "promote", flaky.id).exit_code == 0
    work("boom")  # attempt 2 fails

    job = shown(database_url, schema, reported.id)
    assert job["state"] == "done"
    assert job["progress"]["done"] == 3 and job["progress"]["total"] == 10
    assert job["progress"]["message"] == "copying files"
    assert job["errors"] == []

    failed = shown(database_url, schema, flaky.id)
    assert failed["state"] == "delayed" and failed["attempt"] == 2
    assert [(e["attempt"], e["type"], e["message"]) for e in failed["errors"]] == [
        (1, "RuntimeError", "attempt 1 broke"),
        (2, "RuntimeError", "attempt 2 broke"),
    ]
    assert all(datetime.fromisoformat(e["at"].replace("Z", "+00:00")).tzinfo for e in failed["errors"])

    view = human(schema, "show", reported.id)
    assert view.exit_code == 0, view.output
    assert "3/10 copying files" in view.stdout and "reported " in view.stdout
    errors = human(schema, "show", flaky.id)
    assert "errors of failed attempts" in errors.stdout
    assert "RuntimeError: attempt 1 broke" in errors.stdout
    assert "RuntimeError: attempt 2 broke" in errors.stdout

    table = human(schema, "ls")
    assert table.exit_code == 0, table.output
    assert "progress" in table.stdout and "3/10 copying files" in table.stdout
    (row,) = [j for j in page(database_url, schema)["jobs"] if j["id"] == flaky.id]
    assert len(row["errors"]) == 2 and "steps" not in row


# -- bulk verbs ---------------------------------------------------------------------------------


def test_requeue_all_moves_a_batch_oldest_first_and_says_what_remains(
    database_url: str, schema: str, cliapp: ModuleType
) -> None:
    ids = dead_jobs(cliapp, 3)

    dry = invoke(database_url, schema, "requeue", "--all", "--state", "dead", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert as_json(dry) == {"verb": "requeue", "affected": 3, "remaining": 0, "dry_run": True}
    assert {state for state, _ in states(database_url, schema).values()} == {"dead"}
    told = human(schema, "requeue", "--all", "--state", "dead", "--limit", "2", "--dry-run")
    assert told.stdout.startswith("would requeue 2 jobs; 1 would remain for another call (dry run: nothing changed)")
    assert {state for state, _ in states(database_url, schema).values()} == {"dead"}

    batch = human(schema, "requeue", "--all", "--state", "dead", "--queue", "boom", "--limit", "2")
    assert batch.exit_code == 0, batch.output
    assert batch.stdout.startswith("requeued 2 jobs; 1 remains — run it again\n")
    assert f"next: workhorse --schema {schema} requeue --all --state dead --queue boom --limit 2" in batch.stdout
    now = states(database_url, schema)
    assert [now[i][0] for i in ids] == ["ready", "ready", "dead"]  # oldest first
    assert now[ids[0]][1] == 0  # attempts reset

    rest = invoke(database_url, schema, "requeue", "--all", "--state", "dead", "--json")
    assert as_json(rest) == {"verb": "requeue", "affected": 1, "remaining": 0, "dry_run": False}
    again = human(schema, "requeue", "--all", "--state", "dead")
    assert again.stdout.startswith("requeued 0 jobs; none remain")


def test_promote_cancel_and_rm_all(database_url: str, schema: str, cliapp: ModuleType) -> None:
    waiting = [cliapp.add.enqueue_sync({"a": i, "b": 1}, delay="1h").id for i in range(3)]
    loud = cliapp.shout.enqueue_sync({"text": "later"}, delay="1h").id

    promoted = invoke(database_url, schema, "promote", "--all", "--state", "delayed", "--queue", "default", "--json")
    assert as_json(promoted) == {"verb": "promote", "affected": 3, "remaining": 0, "dry_run": False}
    now = states(database_url, schema)
    assert [now[i][0] for i in waiting] == ["ready"] * 3
    assert now[loud][0] == "delayed"
    one = human(schema, "promote", "--all", "--state", "delayed")
    assert one.stdout.startswith("promoted 1 job; none remain")

    cancelled = invoke(database_url, schema, "cancel", "--all", "--state", "ready", "--name", "cli.add", "--json")
    assert as_json(cancelled)["affected"] == 3
    now = states(database_url, schema)
    assert [now[i][0] for i in waiting] == ["cancelled"] * 3
    assert now[loud][0] == "ready"

    removed = invoke(database_url, schema, "rm", "--all", "--state", "cancelled", "--limit", "2", "--json")
    assert as_json(removed) == {"verb": "remove", "affected": 2, "remaining": 1, "dry_run": False}
    said = human(schema, "rm", "--all", "--state", "cancelled")
    assert said.stdout.startswith("removed 1 job; none remain")
    assert set(states(database_url, schema)) == {loud}


BULK_REFUSALS = [
    (["requeue", "ID", "--all", "--state", "dead"], "CLI_USAGE"),
    (["requeue"], "CLI_USAGE"),
    (["rm"], "CLI_USAGE"),
    (["requeue", "--all"], "CLI_USAGE"),
    (["cancel", "--all", "--queue", "boom"], "CLI_USAGE"),
    (["requeue", "ID", "--state", "dead"], "CLI_USAGE"),
    (["rm", "ID", "--dry-run"], "CLI_USAGE"),
    (["promote", "ID", "--queue", "boom", "--limit", "5"], "CLI_USAGE"),
    (["requeue", "--all", "--state", "dead", "--from-step", "charge"], "CLI_USAGE"),
    (["requeue", "--all", "--state", "ready"], "BULK_STATE_INVALID"),
    (["rm", "--all", "--state", "running"], "BULK_STATE_INVALID"),
    (["promote", "--all", "--state", "dead"], "BULK_STATE_INVALID"),
    (["cancel", "--all", "--state", "done"], "BULK_STATE_INVALID"),
    (["requeue", "--all", "--state", "dead", "--limit", "5000"], "BULK_LIMIT_INVALID"),
    (["rm", "--all", "--state", "dead", "--limit", "0"], "BULK_LIMIT_INVALID"),
    (["cancel", "--all", "--state", "zombie"], "STATE_UNKNOWN"),
]


def test_bulk_refusals_change_nothing(database_url: str, schema: str, cliapp: ModuleType) -> None:
    dead = dead_jobs(cliapp, 2)
    cliapp.add.enqueue_sync({"a": 1, "b": 1})
    cliapp.add.enqueue_sync({"a": 1, "b": 1}, delay="1h")
    before = states(database_url, schema)

    for words, code in BULK_REFUSALS:
        args = [dead[0] if word == "ID" else word for word in words]
        error = refused(invoke(database_url, schema, *args, "--json"), code)
        assert error["cause"] and error["fix"], words
        refused_human(invoke(database_url, schema, *args), code)
        assert states(database_url, schema) == before, words


def test_bulk_usage_refusals_say_what_to_run(database_url: str, schema: str, cliapp: ModuleType) -> None:
    both = refused(invoke(database_url, schema, "requeue", UNKNOWN_ID, "--all", "--json"), "CLI_USAGE")
    assert "not both" in both["cause"]
    assert both["fix"].startswith(f"workhorse requeue {UNKNOWN_ID}")
    assert "workhorse requeue --all --state dead --dry-run" in both["fix"]

    neither = refused(invoke(database_url, schema, "cancel", "--json"), "CLI_USAGE")
    assert "--all" in neither["cause"] and "workhorse cancel --all --state ready" in neither["fix"]

    stateless = refused(invoke(database_url, schema, "promote", "--all", "--json"), "CLI_USAGE")
    assert "--state" in stateless["cause"] and "delayed, ready" in stateless["cause"]
    assert stateless["fix"] == "workhorse promote --all --state delayed --dry-run"

    narrowing = refused(invoke(database_url, schema, "rm", UNKNOWN_ID, "--state", "dead", "--json"), "CLI_USAGE")
    assert narrowing["cause"].startswith("--state only narrows --all")


def test_one_job_verbs_still_take_an_id(database_url: str, schema: str, cliapp: ModuleType) -> None:
    (dead,) = dead_jobs(cliapp, 1)

    requeued = invoke(database_url, schema, "requeue", dead, "--json")
    assert as_json(requeued)["state"] == "ready"
    cancelled = human(schema, "cancel", dead)
    assert cancelled.stdout.startswith(f"cancelled {short_id(dead)} (cli.boom)")
    removed = invoke(database_url, schema, "rm", dead, "--json")
    assert as_json(removed)["removed"]["id"] == dead
    refused(invoke(database_url, schema, "promote", dead, "--json"), "JOB_NOT_FOUND")


# -- pause and resume ---------------------------------------------------------------------------


def test_pause_holds_a_queue_until_resume(database_url: str, schema: str, cliapp: ModuleType) -> None:
    held = cliapp.shout.enqueue_sync({"text": "wait"})

    paused = invoke(database_url, schema, "pause", "loud", "--reason", "provider outage", "--json")
    assert paused.exit_code == 0, paused.output
    first = as_json(paused)
    assert set(first) == {"queue", "paused_at", "reason"}
    assert (first["queue"], first["reason"]) == ("loud", "provider outage")
    assert first["paused_at"].endswith("Z")

    work("loud")
    assert shown(database_url, schema, held.id)["state"] == "ready"  # nothing claimed from a paused queue

    again = as_json(invoke(database_url, schema, "pause", "loud", "--json"))
    assert again == first  # the first paused_at, and the reason kept
    said = human(schema, "pause", "loud")
    assert said.stdout.startswith("paused queue loud since ")
    assert "(provider outage)" in said.stdout
    assert f"workhorse --schema {schema} resume loud" in said.stdout

    resumed = invoke(database_url, schema, "resume", "loud", "--json")
    assert as_json(resumed) == {"queue": "loud", "resumed": True}
    assert as_json(invoke(database_url, schema, "resume", "loud", "--json")) == {"queue": "loud", "resumed": False}
    assert human(schema, "resume", "loud").stdout.startswith("queue loud was not paused; nothing changed")
    invoke(database_url, schema, "pause", "loud")
    assert human(schema, "resume", "loud").stdout.startswith("resumed queue loud")

    work("loud")
    assert shown(database_url, schema, held.id)["state"] == "done"


@pytest.mark.parametrize("command", ["pause", "resume"])
def test_pause_and_resume_refuse_a_bad_queue_name(
    database_url: str, schema: str, cliapp: ModuleType, command: str
) -> None:
    for name in ("", "   ", "q" * 201):
        error = refused(invoke(database_url, schema, command, name, "--json"), "QUEUE_NAME_INVALID")
        assert error["fix"] == f"workhorse {command} emails"
    refused_human(invoke(database_url, schema, command, ""), "QUEUE_NAME_INVALID")
    assert as_json(invoke(database_url, schema, "stats", "--json"))["paused"] == []


# -- stats --------------------------------------------------------------------------------------


def test_stats_per_queue_and_name(database_url: str, schema: str, cliapp: ModuleType) -> None:
    for i in range(2):
        cliapp.add.enqueue_sync({"a": i, "b": 1})
    work("default")
    dead_jobs(cliapp, 1)
    cliapp.add.enqueue_sync({"a": 9, "b": 1})
    cliapp.add.enqueue_sync({"a": 9, "b": 2}, delay="1h")
    invoke(database_url, schema, "pause", "loud", "--reason", "maintenance")

    result = invoke(database_url, schema, "stats", "--json")
    assert result.exit_code == 0, result.output
    report = as_json(result)
    assert set(report) == {"at", "window_seconds", "workers", "queues", "names", "paused", "database"}
    assert set(report["database"]) == {"autovacuum", "warnings", "tables", "horizon"}
    assert report["window_seconds"] == 3600 and report["workers"] == 0
    queues = {q["queue"]: q for q in report["queues"]}
    assert set(queues) == {"default", "boom", "loud"}
    default = queues["default"]
    assert (default["ready"], default["delayed"], default["completed"], default["failures"]) == (1, 1, 2, 0)
    assert default["throughput_per_minute"] == round(2 * 60 / 3600, 3)
    assert default["failure_rate"] == 0.0 and default["paused"] is False
    assert default["oldest_ready_age"] is not None
    boom = queues["boom"]
    assert (boom["dead"], boom["failures"], boom["failure_rate"]) == (1, 1, 1.0)
    assert queues["loud"]["paused"] is True
    names = {(n["queue"], n["name"]): n for n in report["names"]}
    assert set(names) == {("default", "cli.add"), ("boom", "cli.boom")}
    assert names[("default", "cli.add")]["completed"] == 2
    assert [(p["queue"], p["reason"]) for p in report["paused"]] == [("loud", "maintenance")]

    narrow = as_json(invoke(database_url, schema, "stats", "--since", "15m", "--json"))
    assert narrow["window_seconds"] == 900

    view = human(schema, "stats", "--since", "90m")
    assert view.exit_code == 0, view.output
    assert view.stdout.startswith("over the last 1h30m · 0 live workers")
    for text in ("ready", "oldest ready", "done/min", "failure rate", "100.0%", "0.0%", "cli.add", "cli.boom"):
        assert text in view.stdout, text
    assert "paused queues" in view.stdout and "maintenance" in view.stdout
    loud_row = next(line for line in view.stdout.splitlines() if line.startswith("loud "))
    assert "paused" in loud_row


def test_stats_on_an_empty_schema(database_url: str, schema: str, cliapp: ModuleType) -> None:
    report = as_json(invoke(database_url, schema, "stats", "--json"))
    assert (report["queues"], report["names"], report["paused"]) == ([], [], [])
    view = human(schema, "stats")
    assert "no queued, running or failed jobs, and nothing settled in the last 1h" in view.stdout


@pytest.mark.parametrize("since", ["soon", "0", "-1h"])
def test_stats_refuses_a_bad_window(database_url: str, schema: str, cliapp: ModuleType, since: str) -> None:
    error = refused(invoke(database_url, schema, "stats", "--since", since, "--json"), "CONFIG_INVALID")
    assert "since" in error["cause"]
    refused_human(invoke(database_url, schema, "stats", "--since", since), "CONFIG_INVALID")


# -- help ---------------------------------------------------------------------------------------


def test_help_shows_the_operator_commands_with_examples() -> None:
    root = CliRunner().invoke(cli, ["--help"])
    for name in ("ls", "show", "cancel", "requeue", "promote", "rm", "pause", "resume", "stats"):
        assert f"\n  {name} " in root.stdout, name
        text = CliRunner().invoke(cli, [name, "--help"]).stdout
        assert "Example" in text, name
        assert f"workhorse {name} " in text, name
    for verb in ("cancel", "requeue", "promote", "rm"):
        text = CliRunner().invoke(cli, [verb, "--help"]).stdout
        for option in ("[ID]", "--all", "--state", "--queue", "--name", "--tenant", "--limit", "--dry-run", "--json"):
            assert option in text, (verb, option)
        assert "--all --state" in text, verb
    ls = CliRunner().invoke(cli, ["ls", "--help"]).stdout
    for option in ("--id-prefix", "--created-from", "--created-to", "--before", "--after"):
        assert option in ls, option


def test_verbs_take_a_unique_id_prefix(database_url: str, schema: str, cliapp: ModuleType) -> None:
    """`show`, `cancel` (and the other verbs) take a unique prefix of an id; a shared one is
    refused with JOB_ID_AMBIGUOUS naming the candidates (issue 16)."""
    first = cliapp.add.enqueue_sync({"a": 1, "b": 2}).id
    second = cliapp.add.enqueue_sync({"a": 1, "b": 3}).id
    a, b = first.replace("-", ""), second.replace("-", "")
    n = next(n for n in range(4, 33) if a[:n] != b[:n])
    assert shown(database_url, schema, a[:n])["id"] == first
    result = invoke(database_url, schema, "cancel", b[:n], "--json")
    assert result.exit_code == 0, result.output
    assert as_json(result)["id"] == second and as_json(result)["state"] == "cancelled"
    if n > 4:  # the two share a prefix: it is refused, naming both
        error = refused(invoke(database_url, schema, "show", a[:4], "--json"), "JOB_ID_AMBIGUOUS")
        assert first in error["cause"] and second in error["cause"]


def test_ls_and_stats_mark_names_the_app_does_not_declare(database_url: str, schema: str, cliapp: ModuleType) -> None:
    """A ready job whose name the app does not declare waits forever: with --app, `ls` marks it
    unknown and says why, and `stats` marks its name row (issue 16, defect 5)."""
    import asyncio

    from workhorse import App

    other = App(database_url, schema=schema)

    @other.job(name="__main__.hello", tenant="none")
    async def hello(ctx: Any, payload: None) -> None: ...

    async def enqueue() -> None:
        await hello.enqueue(None)
        await other.close()

    asyncio.run(enqueue())
    cliapp.add.enqueue_sync({"a": 1, "b": 2})
    listed_text = CliRunner().invoke(cli, ["--app", "cliapp:app", "ls"], env={"COLUMNS": "200"}, color=False)
    assert listed_text.exit_code == 0, listed_text.output
    assert "__main__.hello (unknown)" in listed_text.stdout and "cli.add (unknown)" not in listed_text.stdout
    assert "no job of that name is declared on the app" in listed_text.stdout
    stats = CliRunner().invoke(cli, ["--app", "cliapp:app", "stats", "--json"])
    names = {row["name"]: row["unknown"] for row in as_json(stats)["names"]}
    assert names == {"__main__.hello": True, "cli.add": False}
    bare = invoke(database_url, schema, "stats", "--json")  # without --app nothing is known, nothing marked
    assert {row["name"]: row["unknown"] for row in as_json(bare)["names"]} == {
        "__main__.hello": False,
        "cli.add": False,
    }


# -- search (issue 29) ----------------------------------------------------------------------------


def test_ls_searches_a_payload_field_and_an_errors_text(database_url: str, schema: str, cliapp: ModuleType) -> None:
    refs = [cliapp.add.enqueue_sync({"a": i, "b": {"c": i % 2}}) for i in range(4)]
    dead = dead_jobs(cliapp, 2)
    assert listed(database_url, schema, "--payload", "a=2") == [refs[2].id]
    assert listed(database_url, schema, "--payload", "b.c=1") == [refs[3].id, refs[1].id]
    assert listed(database_url, schema, "--payload", '{"a": 3}') == [refs[3].id]
    assert listed(database_url, schema, "--error", "REFUSED 1") == [dead[1]]
    assert listed(database_url, schema, "--error", "refused", "--state", "dead") == dead[::-1]
    document = as_json(invoke(database_url, schema, "ls", "--json", "--error", "refused"))
    assert document["scanned"] == 2  # only the jobs that ever failed are walked (jobs_errored_idx)
    refused(invoke(database_url, schema, "ls", "--payload", "nonsense", "--json"), "SEARCH_INVALID")
    view = human(schema, "ls", "--payload", "a=2")
    assert view.exit_code == 0 and short_id(refs[2].id) in view.stdout
    assert "searched 6 jobs (at most 10,000 a page)" in view.stdout
    none = human(schema, "ls", "--error", "no such text")
    assert none.stdout.startswith("no jobs match\nsearched 2 jobs")
