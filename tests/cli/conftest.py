"""Fixtures for the CLI tests: the environment a user's shell would have, and ``cliapp`` on this
test's schema."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from clikit import HERE


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path) -> None:
    # monkeypatch restores these, including what the CLI itself sets for --app with --database-url.
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    monkeypatch.setenv("WORKHORSE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKHORSE_APP", raising=False)


@pytest.fixture
def cliapp(monkeypatch: pytest.MonkeyPatch, schema: str) -> Iterator[ModuleType]:
    """``tests/cli/cliapp.py`` imported fresh on this test's schema (migrated), as ``--app cliapp:app`` sees it."""
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "cliapp", raising=False)
    module = importlib.import_module("cliapp")
    module.app.migrate_sync()
    yield module
    asyncio.run(module.app.close())
