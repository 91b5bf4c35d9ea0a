"""Every value that comes from the database or the operator reaches Rich as text, never markup:
tenants, idempotency keys, job names, queues, payloads, results, errors, progress messages,
worker ids and hosts, pause reasons and task names that look like Rich markup (or emoji codes)
are printed verbatim by every human-output command, with or without colour (issue 16)."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from click.testing import CliRunner, Result
from clikit import HERE, as_json, invoke

from workhorse.cli import cli

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def hostileapp(monkeypatch: pytest.MonkeyPatch, schema: str) -> Iterator[ModuleType]:
    """``tests/cli/hostileapp.py`` on this test's schema (migrated), as ``--app hostileapp:app`` sees it."""
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "hostileapp", raising=False)
    module = importlib.import_module("hostileapp")
    module.app.migrate_sync()
    yield module
    asyncio.run(module.app.close())


class Screen:
    """Runs human-output commands on one schema, plain or in colour, and notes every command that
    did not print what it was given (all of them are run, so a failure names each culprit)."""

    def __init__(self, schema: str, *, colour: bool) -> None:
        self.schema, self.colour = schema, colour
        self.problems: list[str] = []

    def run(self, *args: str) -> Result:
        env: dict[str, str | None] = {"COLUMNS": "250", "NO_COLOR": None, "FORCE_COLOR": "1" if self.colour else None}
        return CliRunner().invoke(cli, ["--schema", self.schema, *args], env=env, color=self.colour)

    def shows(self, args: list[str], *literals: str) -> None:
        """Run ``args``: exit 0, no markup error, no hyperlink, no styling without colour, and every
        literal verbatim in stdout (once the CLI's own styling is taken away)."""
        result = self.run(*args)
        command = " ".join(args)
        if result.exit_code != 0:  # a MarkupError (or any exception) exits 1
            self.problems.append(f"{command}: exit {result.exit_code}, {result.exception!r}")
            return
        if "\x1b]8;" in result.stdout:
            self.problems.append(f"{command}: a hyperlink was rendered from user data")
        if not self.colour and "\x1b" in result.stdout:
            self.problems.append(f"{command}: styling without colour (something was read as markup)")
        text = _ANSI.sub("", result.stdout)
        missing = [literal for literal in literals if literal not in text]
        if missing:
            self.problems.append(f"{command}: missing {missing!r} in\n{text}")


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
def test_every_command_prints_hostile_values_verbatim(
    database_url: str, schema: str, hostileapp: ModuleType, colour: bool
) -> None:
    hostile: list[str] = hostileapp.HOSTILE
    name, queue, task = hostileapp.NAME, hostileapp.QUEUE, hostileapp.TASK
    job = hostileapp.hostile
    ran = {
        value: job.enqueue_sync(
            {
                "tenant": value,
                "progress": value,
                "result": {"out": value, value: "key"},
                "error": value if index % 2 else None,
            },
            key=f"k{value}",
        ).id
        for index, value in enumerate(hostile)
    }
    waiting = job.enqueue_sync(
        {"tenant": "[/]", "progress": "-", "result": None, "error": None}, key="later:[/]", delay="1h"
    ).id
    worked = CliRunner().invoke(cli, ["--app", "hostileapp:app", "worker", "--burst", "--queues", queue, "--json"])
    assert worked.exit_code == 0, worked.output
    assert as_json(invoke(database_url, schema, "show", ran["[/]"], "--json"))["tenant"] == "[/]"  # --json as ever

    screen = Screen(schema, colour=colour)
    # ls: every name, queue, tenant, progress message and error; and with each filter.
    screen.shows(["ls", "--limit", "50"], name, queue, *hostile)
    for value in hostile:
        screen.shows(["ls", "--tenant", value], value, name, queue)
    screen.shows(["ls", "--queue", queue, "--name", name, "--state", "dead"], name, queue, hostile[1])
    # show: name (title and row), queue, tenant, key, payload, result, progress, the error.
    for index, value in enumerate(hostile):
        screen.shows(["show", ran[value]], name, queue, value, f"k{value}", f"1/2 {value}")
        if index % 2:
            screen.shows(["show", ran[value]], f"TerminalError: {value}")
    screen.shows(["show", waiting], "later:[/]")

    # pause with a hostile reason; stats shows it, the queue and the job name.
    reason = "disk [bold]full[/bold] at file:[/srv/in/a.csv] [link=http://x]y[/link]"
    screen.shows(["pause", queue, "--reason", reason], f"queue {queue} since", reason)
    screen.shows(["stats"], queue, name, reason)
    screen.shows(["resume", queue], f"queue {queue}")
    screen.shows(["resume", queue], f"queue {queue} was not paused")

    # workers: a registry row whose id, host and queues are hostile.
    from workhorse import App
    from workhorse.types import WorkerInfo

    async def register() -> None:
        app = App(database_url, schema=schema)
        info = WorkerInfo(id="w[bold]1[/bold]", host="[/]box", pid=42, queues=[queue], concurrency={queue: 5})
        await app.driver.register_worker(info, ttl=30)
        await app.close()

    asyncio.run(register())
    screen.shows(["workers"], "w[bold]1[/bold]", "[/]box", f"{queue}(5)")

    # tasks: a declared task's hostile name.
    screen.shows(["--app", "hostileapp:app", "tasks"], task)

    # the verbs' confirmations, one job and --all (whose `next:` line repeats the filters).
    screen.shows(["promote", waiting], name)
    screen.shows(["cancel", waiting], name)
    screen.shows(["requeue", waiting], name)
    screen.shows(["rm", waiting], name)
    screen.shows(["requeue", "--all", "--state", "dead", "--queue", queue, "--limit", "1"], queue)
    screen.shows(["cancel", "--all", "--state", "ready", "--tenant", "[bold]x[/bold]", "--dry-run"], "would cancel")
    assert not screen.problems, "\n".join(screen.problems)


def test_the_cli_builds_its_consoles_in_one_place() -> None:
    """Markup is off on the consoles ``cli/output.py`` builds; a console built anywhere else, or
    markup parsed on purpose, would bring the injection back."""
    source = HERE.parents[1] / "src" / "workhorse" / "cli"
    for path in sorted(source.glob("*.py")):
        text = path.read_text()
        if path.name != "output.py":
            assert "Console(" not in text, f"{path.name} builds a Console: use cli.output.stdout()/stderr()"
        assert "from_markup" not in text and "render_markup" not in text, f"{path.name} parses markup"
