"""The tables read at 80 columns (issue 16): `ls`, `stats`, `show`, `workers` and `tasks` keep
their key columns whole at 80 and at 120 columns; what does not fit is left out or cut."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from click.testing import CliRunner
from clikit import HERE

from workhorse.cli import cli
from workhorse.drivers.base import WorkerInfo


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
    assert one_line_with(render(width, "ls"), job_id, "reports.build", "reports", "ready")
    stats = render(width, "stats")
    assert one_line_with(stats, "queue", "ready", "running", "dead", "failed")
    assert one_line_with(stats, "queue", "name", "ready", "running", "dead", "failed")
    assert one_line_with(stats, "reports", "reports.build")
    show = render(width, "show", job_id)
    assert one_line_with(show, "reports.build") and one_line_with(show, "ready")
    assert one_line_with(render(width, "workers"), "w-0123456789abcdef", "4242")
    assert one_line_with(render(width, "tasks"), "reports.nightly")
