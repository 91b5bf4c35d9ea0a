"""``workhorse demo`` runs end to end on a real PostgreSQL, succeeds, and leaves no schema behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from workhorse.demo import main


def _schemas_like(url: str, pattern: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "select schema_name from information_schema.schemata where schema_name like %s", (pattern,)
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.timeout(90)
def test_demo_succeeds_and_drops_its_schema(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    schema = f"demo_test_{uuid.uuid4().hex[:10]}"
    began = time.monotonic()

    assert main(database_url, schema=schema) == 0

    took = time.monotonic() - began
    out = capsys.readouterr().out
    assert took < 60, f"the demo took {took:.1f}s"
    assert schema in out
    assert "duplicate=True" in out
    assert "DEAD-LETTERED charge_card" in out
    assert "what you just saw" in out
    assert "demo failed" not in out
    assert _schemas_like(database_url, schema) == set()


@pytest.mark.timeout(120)
def test_module_entry_point_runs_the_demo(database_url: str) -> None:
    before = _schemas_like(database_url, "demo\\_%")
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url}

    done = subprocess.run(
        [sys.executable, "-m", "workhorse", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "dead" in done.stdout
    assert "charge_card" in done.stdout
    assert _schemas_like(database_url, "demo\\_%") - before == set()
