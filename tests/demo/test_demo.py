"""``workhorse demo`` runs end to end on a real PostgreSQL, succeeds, and keeps its jobs in a schema
of its own, so the commands it suggests afterwards show them (issue 29)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse.demo import main
from workhorse.ids import short_id


def _schemas_like(url: str, pattern: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "select schema_name from information_schema.schemata where schema_name like %s", (pattern,)
        ).fetchall()
    return {row[0] for row in rows}


@pytest.fixture
def demo_schema(database_url: str) -> Iterator[str]:
    name = f"demo_test_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {name} cascade")  # type: ignore[arg-type]


def _workhorse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhorse", *args], env=env, capture_output=True, text=True, timeout=100, check=False
    )


@pytest.mark.timeout(90)
def test_demo_succeeds_and_keeps_its_jobs(
    database_url: str, demo_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    began = time.monotonic()

    assert main(database_url, schema=demo_schema) == 0

    took = time.monotonic() - began
    out = capsys.readouterr().out
    assert took < 60, f"the demo took {took:.1f}s"
    assert "duplicate=True" in out
    assert "DEAD-LETTERED charge_card" in out
    assert "what you just saw" in out
    assert "demo failed" not in out
    assert f"workhorse --schema {demo_schema} ls --state dead" in out  # the advice names its schema
    assert _schemas_like(database_url, demo_schema) == {demo_schema}

    # a second run starts afresh: the last run's jobs are replaced, not added to
    assert main(database_url, schema=demo_schema) == 0
    with psycopg.connect(database_url) as conn:
        count = conn.execute(f"select count(*) from {demo_schema}.jobs").fetchone()  # type: ignore[arg-type]
    assert count == (25,)


@pytest.mark.timeout(120)
def test_the_demos_advice_works_right_after_it(database_url: str, demo_schema: str) -> None:
    """`python -m workhorse --schema S demo`, then the two commands it suggests, as a newcomer types them."""
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "COLUMNS": "80"}

    done = _workhorse(env, "--schema", demo_schema, "demo")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "charge_card" in done.stdout
    dead_line = next(line for line in done.stdout.splitlines() if f"--schema {demo_schema} show " in line)
    dead_id = dead_line.split(" show ", 1)[1].split()[0]
    assert len(dead_id) == 12  # the short id, as `ls` prints it
    listed = _workhorse(env, "--schema", demo_schema, "ls", "--state", "dead")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert any(dead_id in line and "charge_card" in line for line in listed.stdout.splitlines()), listed.stdout
    shown = _workhorse(env, "--schema", demo_schema, "show", dead_id, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    job = json.loads(shown.stdout)
    assert (short_id(job["id"]), job["name"], job["state"]) == (dead_id, "charge_card", "dead")
    assert job["last_error"]["message"] == "card declined"


# What `make demo` installs: workhorse with its `embedded` extra, never the development extras.
DEV_ONLY = (
    "starlette", "jinja2", "uvicorn", "httpx", "playwright", "sqlalchemy", "django", "pydantic",
    "standardwebhooks", "pytest", "mypy", "ruff", "opentelemetry",
)  # fmt: skip
BLOCKER = """
import importlib.abc, sys

class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"{{name}} is not installed by `make demo`", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
"""


@pytest.mark.timeout(120)
def test_the_demo_needs_only_what_make_demo_installs(database_url: str, demo_schema: str, tmp_path: Path) -> None:
    """Issue 29: `make demo` installs `.[embedded]` (not `.[dev]`: a browser driver, Django, mypy),
    says what it installs, and the demo runs with nothing more (dev-only packages made unimportable)."""
    repo = Path(__file__).resolve().parents[2]
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(repo / name, tmp_path / name)
    plan = {
        target: subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
        for target in ("demo", "test")
    }
    assert "pip install --quiet -e '.[embedded]'" in plan["demo"] and "[dev]" not in plan["demo"]
    assert "pip install --quiet -e '.[dev]'" in plan["test"]
    for target in ("demo", "test"):
        assert plan[target].count('echo "make: ') >= 3, plan[target]  # creating, upgrading, installing: said
    extras = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [req.split(">")[0] for req in extras["embedded"]] == ["pgserver"]

    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(DEV_ONLY)))
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "PYTHONPATH": str(tmp_path)}
    blocked = subprocess.run(
        [sys.executable, "-c", "import starlette"], env=env, capture_output=True, text=True, check=False
    )
    assert "is not installed by `make demo`" in blocked.stderr  # the blocker works
    done = _workhorse(env, "--schema", demo_schema, "demo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DEAD-LETTERED charge_card" in done.stdout
