"""Terminal escapes from job data never reach the terminal (issue 27, defect 4): a tenant, key,
error, progress message, pause reason or worker id carrying ``ESC ]0;…BEL ESC[2J`` (or a C1 CSI,
a CR, a DEL) is printed with its control characters shown (``\\x1b``), by every human-output
command, in colour or not, and when a column width cuts the value."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from click.testing import CliRunner
from clikit import HERE

from workhorse.cli import cli
from workhorse.logs import visible

TITLE = "t\x1b]0;pwned\x07\x1b[2Jx"  # sets the window title, then clears the screen
OTHERS = ["c1\x9b31mred", "cr\roverwritten", "del\x7fete", "bell\x07\x08back"]
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the CLI's own colours, in colour mode
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def hostileapp(monkeypatch: pytest.MonkeyPatch, schema: str) -> Iterator[ModuleType]:
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "hostileapp", raising=False)
    module = importlib.import_module("hostileapp")
    module.app.migrate_sync()
    yield module
    asyncio.run(module.app.close())


def test_visible_shows_every_control_but_newline_and_tab() -> None:
    assert visible(TITLE) == "t\\x1b]0;pwned\\x07\\x1b[2Jx"
    assert visible("a\x9bb\x7fc\rd\x00e") == "a\\x9bb\\x7fc\\x0dd\\x00e"
    assert visible("line\n\tindented é ☃") == "line\n\tindented é ☃"


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("columns", ["250", "60"], ids=["wide", "cut"])
def test_no_command_prints_a_control_character_from_the_database(
    schema: str, hostileapp: ModuleType, colour: bool, columns: str
) -> None:
    job, queue = hostileapp.hostile, hostileapp.QUEUE
    ids = []
    for index, value in enumerate([TITLE, *OTHERS]):
        payload = {
            "tenant": value,
            "progress": value * 3,
            "result": {value: value},
            "error": value if index % 2 else None,
        }
        ids.append(job.enqueue_sync(payload, key=f"k{value}").id)
    worked = CliRunner().invoke(cli, ["--app", "hostileapp:app", "worker", "--burst", "--queues", queue, "--json"])
    assert worked.exit_code == 0, worked.output

    env: dict[str, str | None] = {"COLUMNS": columns, "NO_COLOR": None, "FORCE_COLOR": "1" if colour else None}
    problems = []
    commands = [
        ["ls"],
        ["ls", "--state", "dead"],
        ["ls", "--tenant", TITLE],
        *(["show", job_id] for job_id in ids),
        ["pause", queue, "--reason", TITLE],
        ["stats"],
        ["resume", queue],
    ]
    for args in commands:
        result = CliRunner().invoke(cli, ["--schema", schema, *args], env=env, color=colour)
        assert result.exit_code == 0, (args, result.output)
        shown = _SGR.sub("", result.stdout) if colour else result.stdout
        if _RAW.search(shown):
            problems.append(f"{args}: {_RAW.findall(shown)!r} in\n{shown}")
        readable = columns == "250" and (args[0] == "pause" or args[:2] == ["show", ids[0]])
        if readable and "\\x1b]0;pwned\\x07" not in shown:
            problems.append(f"{args}: the escape is not shown as text in\n{shown}")
    assert not problems, "\n".join(problems)


def test_json_output_escapes_c1_and_del_too(database_url: str, schema: str, hostileapp: ModuleType) -> None:
    ref = hostileapp.hostile.enqueue_sync({"tenant": "c1\x9b31m\x7f", "progress": "-", "result": None, "error": None})
    result = CliRunner().invoke(cli, ["--schema", schema, "show", ref.id, "--json"])
    assert result.exit_code == 0, result.output
    assert not _RAW.search(result.stdout.replace("\n", "")), repr(result.stdout)
    assert "\\u009b" in result.stdout and "\\u007f" in result.stdout
