"""Every statement of ``workhorse/outbox/queries.py`` prepared by the server against a schema holding both
the queue's tables and the staging table (one database may be both source and queue)."""

from __future__ import annotations

import re

import psycopg
import pytest

import workhorse.outbox.queries as sql
from workhorse import App, Outbox

STATEMENTS = sorted((name, value) for name, value in vars(sql).items() if name.isupper() and isinstance(value, str))


@pytest.mark.parametrize(("name", "statement"), STATEMENTS, ids=[n for n, _ in STATEMENTS])
def test_every_outbox_statement_prepares(name: str, statement: str, database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)
    app.migrate_sync()
    with psycopg.connect(database_url) as conn:
        Outbox(app).migrate_sync(conn)
    text = statement.replace("{schema}", schema)
    params: dict[str, int] = {}
    text = re.sub(r"%\((\w+)\)s", lambda m: f"${params.setdefault(m.group(1), len(params) + 1)}", text)
    with psycopg.connect(database_url, autocommit=True) as conn:
        if text.lstrip().startswith(("create", "listen")):
            with conn.transaction(force_rollback=True):
                conn.execute(text)  # type: ignore[arg-type]
            return
        conn.execute(f"prepare check_stmt as {text}")  # type: ignore[arg-type]
        conn.execute("deallocate check_stmt")


def test_the_claim_reads_the_pending_index(database_url: str, schema: str) -> None:
    """With a large published history the claim walks the partial index of pending rows."""
    app = App(database_url, schema=schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        Outbox(app).migrate_sync(conn)
        conn.execute(
            f"insert into {schema}.outbox (id, name, queue, payload, priority, max_attempts, dead_letter, "  # type: ignore[arg-type]
            "published_at) select gen_random_uuid(), 'n', 'q', '{}', 0, 1, true, now() from generate_series(1, 50000)"
        )
        conn.execute(f"analyze {schema}.outbox")  # type: ignore[arg-type]
        text = sql.CLAIM.replace("{schema}", schema)
        plan = conn.execute(
            f"explain {text}",  # type: ignore[arg-type]
            {"batch": 500, "relay_id": "r", "lease": 30.0},
        ).fetchall()
    assert "outbox_pending_idx" in "\n".join(r[0] for r in plan)
