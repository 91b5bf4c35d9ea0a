"""The backfill example (docs/guides/backfills.md) runs as written: a pass over a products table fills every slug."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import backfill as bf

PAGE = Path(__file__).parents[2] / "docs" / "guides" / "backfills.md"


def backfill_example() -> str:
    section = PAGE.read_text()
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


async def test_the_readme_backfill_runs(database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The example's SQL names `products` unqualified: this test's schema comes first on the path.
    info = conninfo_to_dict(database_url)
    info["options"] = f"-csearch_path={schema}"
    url = make_conninfo(**info)  # type: ignore[arg-type]
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", url)
    monkeypatch.setenv("WORKHORSE_ENV", "staging")
    namespace: dict[str, Any] = {"__name__": "readme_backfill"}
    exec(compile(backfill_example().replace("App()", f"App(schema={schema!r})"), "backfills.md", "exec"), namespace)
    app = namespace["app"]
    await app.migrate()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create table {schema}.products (id int primary key, name text, slug text)")  # type: ignore[arg-type]
        conn.execute(
            f"insert into {schema}.products (id, name) select i, 'Blue Mug ' || i from generate_series(1, 1200) as i"  # type: ignore[arg-type]
        )
    report = await bf.dry_run(app, "fill-slugs")
    assert report.finished and report.rows == 1200 and report.remaining == 1200
    await bf.start(app, "fill-slugs")
    await app.worker().run(burst=True)
    [status] = await bf.status(app)
    assert status.completed and status.latest is not None and status.latest["rows"] == 1200
    assert status.latest["batches"] == 4  # 500, 500, 200, then the empty batch that ends the sweep
    with psycopg.connect(database_url) as conn:
        slugs = conn.execute(f"select slug from {schema}.products where id = 7").fetchone()  # type: ignore[arg-type]
    assert slugs == ("blue-mug-7",)
    await app.close()
