"""The README's quickstart runs as written (on this test's own schema) and leaves one job done."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).parents[2] / "README.md"


def first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None
    return match.group(1)


def test_readme_example_runs(database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    source = first_python_block()
    assert len(source.strip().splitlines()) <= 20
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(source.replace("App()", f"App(schema={schema!r})"), "README.md", "exec"), namespace)  # runs main()
    app = namespace["app"]

    async def jobs() -> list[tuple[str, Any]]:
        async with app:
            return [(j.state, j.result) for j in (await app.list_jobs()).jobs]

    assert asyncio.run(jobs()) == [("done", {"sent_to": "ada@example.com", "attempt": 1})]
