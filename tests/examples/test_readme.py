"""The README's first example runs as written (on this test's own schema)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).parents[2] / "README.md"


def first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None
    return match.group(1)


async def test_readme_example_runs(database_url: str, schema: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    source = first_python_block()
    assert len(source.strip().splitlines()) <= 20
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(source.replace("App()", f"App(schema={schema!r})"), "README.md", "exec"), namespace)
    await namespace["main"]()
    app = namespace["app"]
    page = await app.list_jobs()
    assert [(j.state, j.result) for j in page.jobs] == [("done", {"sent_to": "ada@example.com", "attempt": 1})]
    await app.close()
