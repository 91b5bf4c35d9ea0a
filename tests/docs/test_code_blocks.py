"""Every ```python block of the docs site and the README runs, against a real PostgreSQL, on a
schema of its own; a block marked ``<!-- fragment -->`` does not, and those stay few."""

from __future__ import annotations

import ast
import asyncio
import gc
import inspect
import os
import sys
import types
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from docblocks import ROOT, pages, python_blocks
from workhorse import App

# A fragment is a promise that a block cannot run alone. Keep them rare: raise this only with a
# reason, and prefer making the example whole.
FRAGMENT_CEILING = 5  # today: a Celery task; Django's settings (2), a jobs module and a view

RUNNABLE = [p for p in pages() if any(not (b.fragment or b.tested_by) for b in python_blocks(p))]


def test_fragments_stay_few() -> None:
    fragments = [b.where for p in pages() for b in python_blocks(p) if b.fragment]
    assert len(fragments) <= FRAGMENT_CEILING, fragments


def test_a_block_tested_elsewhere_is_tested_there() -> None:
    for block in (b for p in pages() for b in python_blocks(p) if b.tested_by):
        test = ROOT / block.tested_by
        assert test.is_file(), block.where
        assert str(block.path.relative_to(ROOT)) in test.read_text(), f"{block.tested_by} does not read {block.where}"


def test_the_pages_have_runnable_examples() -> None:
    executed = sum(1 for p in pages() for b in python_blocks(p) if not b.fragment)
    assert executed >= 30, executed  # the site is taught by examples that run


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_runs(
    page: Path, database_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The examples say App() and name their tables unqualified: both land in this test's schema.
    options = quote(f"-csearch_path={schema},public")
    url = f"{database_url}{'&' if '?' in database_url else '?'}options={options}"
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", url)
    monkeypatch.setenv("DOCS_SCHEMA", schema)
    monkeypatch.chdir(tmp_path)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create schema if not exists {schema}")  # type: ignore[arg-type]
    apps: list[App] = []
    original = App.__init__

    def in_this_schema(self: App, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("driver") != "memory":
            kwargs.setdefault("schema", schema)
        original(self, *args, **kwargs)
        apps.append(self)

    monkeypatch.setattr(App, "__init__", in_this_schema)
    module = types.ModuleType("docs_" + page.stem.replace("-", "_"))  # a real module: dataclasses need one
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    environ = dict(os.environ)  # an example may set a variable (WORKHORSE_ENV): put them back after
    loop = asyncio.new_event_loop()
    try:
        for block in python_blocks(page):
            if block.fragment or block.tested_by:
                continue
            code = compile(block.source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)  # the example as a reader runs it
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
    finally:
        for app in apps:
            loop.run_until_complete(app.close())
        loop.close()
        os.environ.clear()
        os.environ.update(environ)
        gc.collect()  # a socket or file a page left open warns here, in its own test, not a later one
    assert os.environ["WORKHORSE_DATABASE_URL"] == url
