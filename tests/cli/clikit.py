"""Helpers the CLI tests share: run the command line in-process on one schema, read its JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from workhorse.cli import cli

HERE = Path(__file__).parent
UNKNOWN_ID = "0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e"


def invoke(database_url: str, schema: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", database_url, "--schema", schema, *args])


def human(schema: str, *args: str) -> Result:
    """A person's view: wide, no colour, on the URL the environment names (kept out of the footers)."""
    return CliRunner().invoke(cli, ["--schema", schema, *args], env={"COLUMNS": "200"}, color=False)


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def refused(result: Result, code: str) -> dict[str, Any]:
    """A refusal with --json: exit 2, exactly the error document on stdout."""
    assert result.exit_code == 2, result.output
    document = as_json(result)
    assert set(document) == {"error"}
    assert set(document["error"]) == {"code", "cause", "fix"}
    assert document["error"]["code"] == code
    error: dict[str, Any] = document["error"]
    return error


def refused_human(result: Result, code: str) -> None:
    """A refusal for a person: exit 2, nothing on stdout, code and cause then the fix on stderr."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error {code}: "), result.stderr
    assert "\nfix: " in result.stderr
