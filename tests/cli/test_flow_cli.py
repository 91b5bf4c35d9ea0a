"""What the command line says of jobs a fleet-wide cap holds back: `stats` counts them per queue,
`show` names the cap that holds a ready job (both need the app, `--app`, to know its caps)."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from click.testing import CliRunner
from clikit import HERE, as_json

from workhorse.cli import cli


@pytest.fixture
def flowapp(monkeypatch: pytest.MonkeyPatch, schema: str) -> Iterator[ModuleType]:
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "flowcliapp", raising=False)
    module = importlib.import_module("flowcliapp")
    module.app.migrate_sync()
    yield module
    asyncio.run(module.app.close())


def held(flowapp: ModuleType) -> list[str]:
    """Three jobs of a job capped at one run: the first claimed (running), two held back."""

    async def setup() -> list[str]:
        refs = await flowapp.one.enqueue_many([{"org": "a"}] * 3)
        claim = await flowapp.app.driver.claim(
            worker_id="w-test", wants={"default": 10}, names=["flow.one"], visibility=60, flow=flowapp.app.flow_rules()
        )
        assert len(claim.claimed) == 1
        await flowapp.app.close()
        return [r.id for r in refs if r.id != claim.claimed[0].id]

    return asyncio.run(setup())


def run(*args: str) -> object:
    result = CliRunner().invoke(cli, ["--app", "flowcliapp:app", *args], env={"COLUMNS": "200"}, color=False)
    assert result.exit_code == 0, result.output
    return result


def test_show_names_the_cap_that_holds_a_ready_job(flowapp: ModuleType) -> None:
    waiting = held(flowapp)
    document = as_json(run("show", waiting[0], "--json"))
    assert document["state"] == "ready"
    assert len(document["held_back"]) == 1 and "concurrency=1" in document["held_back"][0]
    text = run("show", waiting[0]).stdout  # type: ignore[attr-defined]
    assert "held back" in text and "1 of 1 runs of flow.one" in text


def test_stats_counts_the_jobs_caps_hold_back_per_queue(flowapp: ModuleType) -> None:
    held(flowapp)
    document = as_json(run("stats", "--json"))
    (queue,) = document["queues"]
    assert (queue["queue"], queue["ready"], queue["running"], queue["held_back"]) == ("default", 2, 1, 2)
    lines = run("stats").stdout.splitlines()  # type: ignore[attr-defined]
    header = next(line for line in lines if "held by caps" in line)
    row = next(line for line in lines if line.startswith("default "))
    assert row[: header.index("held by caps") + len("held by caps")].split()[-1] == "2"


def test_a_job_no_cap_holds_says_so(flowapp: ModuleType) -> None:
    async def one_job() -> str:
        ref = await flowapp.one.enqueue({"org": "b"})
        await flowapp.app.close()
        return str(ref.id)

    document = as_json(run("show", asyncio.run(one_job()), "--json"))
    assert document["held_back"] == []
