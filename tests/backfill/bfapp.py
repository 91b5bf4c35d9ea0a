"""The app of the backfill tests, loaded in-process and as ``--app bfapp:app`` (CLI, workers).

``items`` is the user's table: ``fill-slugs`` sets each row's slug and adds one to its ``hits``, so
a row applied twice shows ``hits = 2`` and a row skipped shows no slug. Knobs from the environment:
``BF_SLEEP`` (seconds each batch sleeps inside its transaction, after its writes), ``BF_PAUSE``
(the pause between batches), ``BF_BATCH`` (the batch size).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from workhorse import App
from workhorse.backfill import AppMigration, Batch

URL = os.environ["WORKHORSE_DATABASE_URL"]
SCHEMA = os.environ["WORKHORSE_TEST_SCHEMA"]
ITEMS = f"{SCHEMA}.items"

app = App(URL, schema=SCHEMA)


def create_items(conn: Any, n: int) -> None:
    """The user's table with ``n`` rows (a sync psycopg connection)."""
    conn.execute(
        f"create table {ITEMS} (id int primary key, name text not null, slug text, hits int not null default 0)"
    )
    conn.execute(f"insert into {ITEMS} (id, name) select i, 'Item ' || i from generate_series(1, %s) as i", (n,))


async def count_missing(conn: Any) -> int:
    cur = await conn.execute(f"select count(*) from {ITEMS} where slug is null")
    row = await cur.fetchone()
    return int(row[0])


@app.backfill(
    "fill-slugs",
    tenant="none",
    batch_size=int(os.environ.get("BF_BATCH", "10")),
    count=count_missing,
    pause=os.environ.get("BF_PAUSE") or None,
)
async def fill_slugs(conn: Any, cursor: Any, limit: int) -> Batch | None:
    cur = await conn.execute(
        f"with b as (select id from {ITEMS} where id > %s order by id limit %s) "
        f"update {ITEMS} as i set slug = 'item-' || i.id, hits = i.hits + 1 from b where i.id = b.id returning i.id",
        (cursor or 0, limit),
    )
    ids = [row[0] for row in await cur.fetchall()]
    await asyncio.sleep(float(os.environ.get("BF_SLEEP", "0")))
    if not ids:
        return None
    return Batch(max(ids), rows=len(ids))


async def count_everything(conn: Any) -> int:
    cur = await conn.execute(f"select count(*) from {ITEMS} where slug is distinct from 'never'")
    row = await cur.fetchone()
    return int(row[0])


@app.backfill("sweeps-nothing", tenant="none", count=count_everything)
async def sweeps_nothing(conn: Any, cursor: Any, limit: int) -> None:
    return None  # ends the sweep at once, while its count still answers every row: stalled


@app.backfill("breaks", tenant="none", batch_size=5)
async def breaks(conn: Any, cursor: Any, limit: int) -> int:
    await conn.execute(f"update {ITEMS} set slug = 'broken' where id <= %s", (limit,))
    raise RuntimeError("the batch broke after its update")


@app.backfill("production-only", tenant="none", environments=("production",))
async def production_only(conn: Any, cursor: Any, limit: int) -> None:
    return None


@app.backfill("needs-ours", tenant="none", requires="workhorse:999")
async def needs_ours(conn: Any, cursor: Any, limit: int) -> None:
    return None


@app.backfill("needs-app", tenant="none", requires=AppMigration(f"{SCHEMA}.app_migrations", version="42"))
async def needs_app(conn: Any, cursor: Any, limit: int) -> None:
    return None
