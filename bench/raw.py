"""The raw-SQL baseline: a minimal jobs table and the loops a hand-written queue would run.

Imported by ``bench/run.py`` for its statements; run as a subprocess for the two baseline loops
that need their own process:

    python bench/raw.py drain  --schema S     # W2: claim 100 per statement, one ack per batch
    python bench/raw.py listen --schema S     # W3: LISTEN, claim when woken, record latency

The database is ``WORKHORSE_BENCH_URL`` (never on the command line, where ``ps`` would show a
password). Each prints one JSON line on stdout when it is done (``listen``: on SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from typing import Any

import psycopg
from psycopg import sql

QUEUE = "bench"
CLAIM_BATCH = 100


def ddl(schema: str) -> list[str]:
    """The baseline's table: just enough columns to be a queue, and the partial index its claim uses."""
    return [
        f"create table {schema}.jobs (id bigserial primary key, queue text not null, payload jsonb not null, "
        "state text not null default 'ready', run_at timestamptz not null default now())",
        f"create index jobs_ready_idx on {schema}.jobs (queue, run_at, id) where state = 'ready'",
    ]


def channel(schema: str) -> str:
    return f"{schema}_jobs"


def insert_one(schema: str) -> str:
    """W1: one row, autocommit. Answers the id, as any enqueue API must."""
    return f"insert into {schema}.jobs (queue, payload) values (%s, %s) returning id"


def insert_notify(schema: str) -> str:
    """W3: the insert and its wake-up in one statement (one transaction), like a queue's enqueue."""
    return (
        f"with i as (insert into {schema}.jobs (queue, payload) values (%s, %s) returning id) "
        "select pg_notify(%s, '') from i"
    )


def copy_in(schema: str) -> str:
    """W1b: COPY, the fastest way PostgreSQL takes rows."""
    return f"copy {schema}.jobs (queue, payload) from stdin"


def claim(schema: str, returning: str = "id") -> str:
    """W2/W3: up to N due rows per statement, SKIP LOCKED so claimers never wait on each other."""
    return (
        f"update {schema}.jobs set state = 'running' where id in ("
        f"select id from {schema}.jobs where state = 'ready' and queue = %s and run_at <= now() "
        f"order by run_at, id limit %s for update skip locked) returning {returning}"
    )


def ack(schema: str) -> str:
    """W2/W3: one batched ack for everything a claim took."""
    return f"update {schema}.jobs set state = 'done' where id = any(%s)"


async def drain(url: str, schema: str, batch: int) -> dict[str, Any]:
    """W2 baseline: claim ``batch`` rows, ack them in one statement, until nothing is left."""
    started = time.perf_counter()
    done = statements = 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        claim_sql, ack_sql = claim(schema), ack(schema)
        while True:
            cur = await conn.execute(claim_sql, (QUEUE, batch))  # type: ignore[arg-type]
            ids = [row[0] for row in await cur.fetchall()]
            statements += 1
            if not ids:
                break
            await conn.execute(ack_sql, (ids,))  # type: ignore[arg-type]
            statements += 1
            done += len(ids)
    return {"seconds": time.perf_counter() - started, "done": done, "statements": statements}


async def listen(url: str, schema: str, batch: int) -> list[list[Any]]:
    """W3 baseline: woken by NOTIFY, claim, record ``time.time() - payload.t``, ack. Stops on SIGTERM."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    seen: list[list[Any]] = []
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as listener,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as conn,
    ):
        await listener.execute(sql.SQL("listen {}").format(sql.Identifier(channel(schema))))
        print("ready", flush=True)
        claim_sql, ack_sql = claim(schema, "id, payload"), ack(schema)
        while not stop.is_set():
            woken = False
            async for _ in listener.notifies(timeout=0.25, stop_after=1):
                woken = True
            if not woken:
                continue
            while True:
                cur = await conn.execute(claim_sql, (QUEUE, batch))  # type: ignore[arg-type]
                rows = await cur.fetchall()
                now = time.time()
                seen.extend([bool(payload.get("warm")), now - float(payload["t"])] for _, payload in rows)
                if rows:
                    await conn.execute(ack_sql, ([row[0] for row in rows],))  # type: ignore[arg-type]
                if len(rows) < batch:
                    break
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["drain", "listen"])
    parser.add_argument("--schema", required=True)
    parser.add_argument("--batch", type=int, default=CLAIM_BATCH)
    args = parser.parse_args()
    url = os.environ["WORKHORSE_BENCH_URL"]
    if args.mode == "drain":
        out: Any = asyncio.run(drain(url, args.schema, args.batch))
    else:
        out = {"latencies": asyncio.run(listen(url, args.schema, args.batch))}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
