"""The app of the flow-control fault test (tests/process/test_flow_faults.py), run in real worker
subprocesses (`workhorse --app flowapp:app worker`).

One job under both kinds of cap: at most 2 running runs per account (a keyed Concurrency) and at
most 3 per tenant (Limits). Every body writes one ledger row as it starts and completes that row
in a ``finally`` as it ends, returning or cancelled, each on its own autocommit connection, so a
killed body still leaves its start. Both instants are the body's own (``time.time()``, the
realtime clock PostgreSQL's ``clock_timestamp()`` on this same host reads too), taken before the
write: a body frozen while it writes its start row still shows when it started; ``at`` is the
database's clock when the start row landed.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

from workhorse import App, Concurrency, JobContext, Limits, Retry

URL = os.environ["WORKHORSE_DATABASE_URL"]
SCHEMA = os.environ["WORKHORSE_TEST_SCHEMA"]
KEY_CAP = 2
TENANT_CAP = 3
CHUNKS = 6
app = App(URL, schema=SCHEMA, limits=Limits(per_tenant=TENANT_CAP))

LEDGER_DDL = (
    "create table {schema}.flow_ledger (id bigserial primary key, job_id uuid not null, attempt int not null, "
    "pid int not null, tenant text not null, acct text not null, started timestamptz not null, "
    "ended timestamptz, outcome text, reason text, at timestamptz not null default clock_timestamp())"
)


def begin(ctx: JobContext, payload: dict[str, object], started: float) -> int:
    with psycopg.connect(URL, autocommit=True) as conn:
        row = conn.execute(
            f"insert into {SCHEMA}.flow_ledger (job_id, attempt, pid, tenant, acct, started) "  # type: ignore[arg-type]
            "values (%s, %s, %s, %s, %s, to_timestamp(%s)) returning id",
            (ctx.id, ctx.attempt, os.getpid(), payload["tenant"], payload["acct"], started),
        ).fetchone()
    assert row is not None
    return int(row[0])


def finish(row: int, ended: float, outcome: str, reason: str | None) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            f"update {SCHEMA}.flow_ledger set ended = to_timestamp(%s), outcome = %s, reason = %s "  # type: ignore[arg-type]
            "where id = %s",
            (ended, outcome, reason, row),
        )


@app.job(
    name="flow_body",
    tenant=lambda p: p["tenant"],
    concurrency=Concurrency(KEY_CAP, key=lambda p: p["acct"]),
    retry=Retry(attempts=10, base=0),
)
async def flow_body(ctx: JobContext, payload: dict[str, object]) -> str:
    # The ledger writes block the body loop on purpose (a few ms each): a write awaited in a
    # thread could be cut off by a second cancel, and a body that ends must have said so.
    row = begin(ctx, payload, time.time())  # clock-ok: test ledger, compared across processes
    outcome = "cancelled"
    try:
        for _ in range(CHUNKS):  # several awaits: a body that kept running after a thaw shows it
            await asyncio.sleep(float(payload["sleep"]) / CHUNKS)  # type: ignore[arg-type]
        outcome = "returned"
    finally:
        finish(row, time.time(), outcome, ctx.cancel_reason)  # clock-ok: test ledger
    return "slept"
