"""Fuzz what the CLI prints (issue 27): whatever text a job's tenant, key, queue and payload hold,
``ls`` (at any terminal width: a cut value too), ``show`` and ``stats`` print it with no control
character a terminal would obey, in colour or not, and exit 0."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner
from fuzzkit import CONTROLS, FUZZ, SGR, Loop, declare_echo, refusal, storable_json, storable_text
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from workhorse import App
from workhorse.cli import cli


@settings(FUZZ, max_examples=25)  # four commands an example: the slowest fuzz
@given(
    tenant=storable_text,
    key=st.one_of(st.none(), storable_text),
    queue=storable_text,
    payload=storable_json,
    columns=st.integers(min_value=20, max_value=220),
    colour=st.booleans(),
)
def test_the_cli_prints_any_stored_text_without_a_control_character(
    database_url: str,
    fuzz_app: App,
    fuzz_schema: str,
    loop: Loop,
    tenant: str,
    key: str | None,
    queue: str,
    payload: Any,
    columns: int,
    colour: bool,
) -> None:
    try:
        ref = loop.run(declare_echo(fuzz_app).enqueue({"t": tenant, "p": payload}, key=key, queue=queue))
    except Exception as error:
        refusal(error)
        assume(False)  # refused at enqueue: the enqueue fuzz covers that; nothing stored to print
    env: dict[str, str | None] = {"COLUMNS": str(columns), "NO_COLOR": None, "FORCE_COLOR": "1" if colour else None}
    root = ["--database-url", database_url, "--schema", fuzz_schema]
    try:
        for args in (["ls", "--limit", "5"], ["ls", "--tenant", tenant], ["show", ref.id], ["stats"]):
            result = CliRunner().invoke(cli, [*root, *args], env=env, color=colour)
            assert result.exit_code == 0, (args, result.output, result.exception)
            shown = SGR.sub("", result.stdout) if colour else result.stdout
            assert not CONTROLS.search(shown), (args, CONTROLS.findall(shown), shown)
    finally:
        loop.run(fuzz_app.admin.remove(ref.id))
