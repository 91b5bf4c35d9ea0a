"""The tables read at 80 columns (issues 16 and 29): `ls`, `stats`, `show`, `workers` and `tasks`
keep their key columns whole at 80 and at 120 columns; what does not fit is left out or cut, and
one line says which columns were left out."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner
from clikit import HERE

from workhorse.cli import cli
from workhorse.ids import short_id
from workhorse.types import WorkerInfo


@pytest.fixture
def widthapp(monkeypatch: pytest.MonkeyPatch, schema: str) -> Iterator[ModuleType]:
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "widthapp", raising=False)
    module = importlib.import_module("widthapp")
    module.app.migrate_sync()
    yield module
    asyncio.run(module.app.close())


def render(width: int, *args: str) -> list[str]:
    result = CliRunner().invoke(cli, ["--app", "widthapp:app", *args], env={"COLUMNS": str(width)}, color=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), "\n".join(lines)
    return lines


def one_line_with(lines: list[str], *cells: str) -> bool:
    """Some line holds every one of ``cells`` whole (a key column folded over lines would not)."""
    return any(all(cell in line for cell in cells) for line in lines)


@pytest.mark.parametrize("width", [80, 120])
def test_every_table_keeps_its_key_columns(widthapp: ModuleType, width: int) -> None:
    async def setup() -> str:
        ref = await widthapp.build.enqueue({"org": "acme-corporation-international"})
        await widthapp.app.driver.register_worker(
            WorkerInfo(id="w-0123456789abcdef", host="a-rather-long-host-name.internal", pid=4242,
                       queues=["reports"], concurrency={"reports": 10}),
            ttl=60,
        )  # fmt: skip
        await widthapp.app.close()
        return ref.id

    job_id = asyncio.run(setup())
    assert one_line_with(render(width, "ls"), short_id(job_id), "reports.build", "reports", "ready")
    stats = render(width, "stats")
    assert one_line_with(stats, "queue", "ready", "running", "dead", "failed")
    assert one_line_with(stats, "queue", "name", "ready", "running", "dead", "failed")
    assert one_line_with(stats, "reports", "reports.build")
    show = render(width, "show", job_id)
    assert one_line_with(show, "reports.build") and one_line_with(show, "ready")
    assert one_line_with(render(width, "workers"), "w-0123456789abcdef", "4242")
    assert one_line_with(render(width, "tasks"), "reports.nightly")


# -- issue 29: what an operator reads at 80 and 120 columns ---------------------------------------

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def operator_scene(widthapp: ModuleType) -> dict[str, str]:
    """A dead job of a long module-qualified name, a steps job suspended after its first step, two
    jobs a cap holds back behind a running one, and completions: each job's id by role."""

    async def setup() -> dict[str, str]:
        dead = await widthapp.export.enqueue(None)
        steps = await widthapp.assemble.enqueue(None)
        await widthapp.quick.enqueue_many([1, 2, 3])
        await widthapp.app.worker(queues=["batch"], concurrency=4).run(burst=True)
        capped = await widthapp.capped.enqueue_many([1, 2, 3])
        claim = await widthapp.app.driver.claim(
            worker_id="w-test", wants={"reports": 10}, names=["reports.capped"], visibility=60,
            flow=widthapp.app.flow_rules(),
        )  # fmt: skip
        assert len(claim.claimed) == 1
        await widthapp.app.close()
        return {"dead": dead.id, "steps": steps.id, "held": next(r.id for r in capped if r.id != claim.claimed[0].id)}

    return asyncio.run(setup())


def run_json(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


NOTE = re.compile(r"^(\d+) columns? hidden( \((.*)\))?: widen the terminal or use --json$")


def hidden_line_names(lines: list[str]) -> list[str]:
    """The headers the "N columns hidden (a, b): widen the terminal or use --json" lines name
    (each a line of its own; "?" for those a note too narrow to name them counts)."""
    names: list[str] = []
    for line in lines:
        if "hidden" in line and "widen the terminal" in line:
            match = NOTE.match(line.strip())
            assert match, line  # one line, whole
            named = match.group(3).split(", ") if match.group(3) else ["?"] * int(match.group(1))
            assert len(named) == int(match.group(1)), line
            names += named
    return names


@pytest.mark.parametrize("width", [80, 120])
def test_an_operator_reads_whole_names_short_ids_and_what_is_hidden(widthapp: ModuleType, width: int) -> None:
    ids = operator_scene(widthapp)
    name = "accfirst.nightly_invoice_export"
    listed = render(width, "ls")
    # names whole, beside the short id every command takes; never the 36-character id
    assert one_line_with(listed, short_id(ids["dead"]), name, "batch", "dead")
    assert one_line_with(listed, short_id(ids["steps"]), "reports.assemble", "suspended")
    assert not any(ids["dead"] in line for line in listed)
    hidden = hidden_line_names(listed)
    assert set(hidden) <= {"attempt", "tenant", "created", "run at", "progress", "last error"}
    if width == 120:
        assert hidden == []
    # the dead list: the error that killed each job, at 80 columns too
    dead = render(width, "ls", "--state", "dead")
    assert "last error" in dead[0]
    assert one_line_with(dead, short_id(ids["dead"]), name, "TerminalError: inv")
    # a short id is what `show` (and every verb) takes
    shown = render(width, "show", short_id(ids["dead"]))
    assert one_line_with(shown, ids["dead"], f"(short: {short_id(ids['dead'])})")
    assert any("invoice 2024-0042 has no customer on record" in line for line in shown)


@pytest.mark.parametrize("width", [80, 120])
def test_stats_keeps_what_calls_for_action_at_80_columns(widthapp: ModuleType, width: int) -> None:
    operator_scene(widthapp)
    lines = render(width, "stats")
    queue_header = "\n".join(lines[1:3])  # at 80 columns some headers take two lines
    for header in ("queue", "ready", "running", "delayed", "suspended", "dead", "failed", "oldest", "held by"):
        assert header in queue_header, (header, lines)
    assert "done" in queue_header and "/min" in queue_header
    reports = next(line for line in lines if line.startswith("reports "))
    batch = next(line for line in lines if line.startswith("batch "))
    assert reports.split()[1:3] == ["2", "1"]  # ready 2 (held back by the cap), running 1
    assert reports.split()[-1] == "2"  # held by caps: the last column of the queue's row
    assert batch.split()[3:7] == ["0", "1", "1", "0"]  # delayed, suspended, dead, failed
    # per name: names whole; the window's figures (and delayed, suspended) may yield, and it says so
    assert one_line_with(lines, "batch", "accfirst.nightly_invoice_export")
    hidden = hidden_line_names(lines)
    assert set(hidden) <= {"delayed", "suspended", "failure rate", "completed", "oldest ready", "done/min", "?"}
    if width == 120:
        assert set(hidden) <= {"completed"}, hidden


@pytest.mark.parametrize("width", [80, 120])
def test_show_of_a_steps_job_keeps_the_step_names(widthapp: ModuleType, width: int) -> None:
    ids = operator_scene(widthapp)
    shown = render(width, "show", ids["steps"])
    assert one_line_with(shown, "load-the-customer-ledger", "done")
    assert one_line_with(shown, "cool-off-before-sending", "sleeping")
    assert one_line_with(shown, "attempt", "0 of 5", "(ran once;")  # suspended: it did run


@pytest.mark.parametrize("width", [80, 120])
def test_show_says_when_which_worker_and_why_a_drain_handed_a_job_back(widthapp: ModuleType, width: int) -> None:
    async def drained() -> str:
        ref = await widthapp.longrun.enqueue(None)
        worker = widthapp.app.worker(queues=["slow"], drain_timeout="30s", handle_signals=False)
        task = asyncio.create_task(worker.run())
        while (job := await widthapp.app.get_job(ref.id)) is None or job.progress is None:
            await asyncio.sleep(0.05)
        await worker.stop()
        await task
        await widthapp.app.close()
        return str(ref.id)

    job_id = asyncio.run(drained())
    text = " ".join(line.strip(" │") for line in render(width, "show", job_id))
    assert "handed back" in text and "by worker w-" in text and "attempt 1:" in text
    assert "its worker drained and the body handed itself back (ctx.hand_back())" in text
    assert "0 of 5  (ran once; a suspension or hand-back spends no attempt)" in text
    assert "3/10 section 3 of 10" in text and "before the hand-back" in text


@pytest.mark.parametrize("width", [80, 120])
def test_tasks_never_break_a_timestamp(widthapp: ModuleType, width: int) -> None:
    lines = render(width, "tasks")
    assert one_line_with(lines, "reports.nightly", "0 3 * * *")
    assert any(ISO.search(line) for line in lines), lines  # the next fire, whole on its line
    for line in lines:  # no fragment of a timestamp folded onto a line of its own
        assert not re.search(r"(^|\s)\d\d(:\d\d)*(\.\d+)?Z", line) or ISO.search(line), lines


def test_without_the_app_the_caps_are_unknown_not_none(widthapp: ModuleType, schema: str) -> None:
    ids = operator_scene(widthapp)
    bare = ["--schema", schema]
    assert run_json("--app", "widthapp:app", "show", ids["held"])["held_back"] != []  # the cap, named
    assert run_json(*bare, "show", ids["held"])["held_back"] is None  # without the app: unknown
    assert {q["queue"]: q["held_back"] for q in run_json(*bare, "stats")["queues"]} == {"reports": None, "batch": None}
    view = CliRunner().invoke(cli, [*bare, "show", ids["held"]], env={"COLUMNS": "80"}, color=False)
    assert "held back" in view.stdout and "unknown without --app" in view.stdout
    stats = CliRunner().invoke(cli, [*bare, "stats"], env={"COLUMNS": "80"}, color=False)
    assert "held by caps: unknown without --app" in stats.stdout


def test_ls_name_matches_the_last_part_of_a_qualified_name(widthapp: ModuleType, schema: str) -> None:
    ids = operator_scene(widthapp)
    found = run_json("--schema", schema, "ls", "--name", "nightly_invoice_export")
    assert [j["id"] for j in found["jobs"]] == [ids["dead"]]
    assert [j["id"] for j in run_json("--schema", schema, "ls", "--name", "invoice_export")["jobs"]] == []
    exact = run_json("--schema", schema, "ls", "--name", "accfirst.nightly_invoice_export")
    assert [j["id"] for j in exact["jobs"]] == [ids["dead"]]
    assert run_json("--schema", schema, "ls", "--name", "first.nightly_invoice_export")["jobs"] == []
    # a like pattern's characters are the name's own: '_' and '%' match only themselves
    assert run_json("--schema", schema, "ls", "--name", "nightly%export")["jobs"] == []
    assert run_json("--schema", schema, "ls", "--name", "nightly_invoice_expor_")["jobs"] == []
    missed = render(80, "ls", "--name", "nightly_invoice_exprot")
    assert "did you mean accfirst.nightly_invoice_export?" in " ".join(missed)
