"""One statement sent through libpq directly, for the single enqueue.

psycopg's cursor layer (cursor, query conversion, adaptation, result selection) costs about 100 us
of client CPU per call on a 2-core machine: as much as the server spends inserting the row. A
single ``enqueue`` is the one call a web process makes per request, so it skips that layer: its
parameters arrive already as text (``NewJob`` fields are validated strings and numbers), and the
statement is prepared once per connection under a fixed name and then executed with one
Bind/Execute message. Measured by ``bench/run.py`` W1: see the CHANGELOG.

Only for connections the driver owns (its pool, autocommit): a caller's ``conn=`` takes the
ordinary psycopg path, since its transaction and its prepared statements are the caller's.
Through PgBouncer in transaction mode, protocol-level prepared statements need PgBouncer 1.21+
with ``max_prepared_statements`` set, as psycopg's own prepared statements do.
Errors come back as the psycopg exception the cursor would have raised (``error_from_result``),
so the driver translates them as it translates every other error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors, generators, pq

# SQLSTATE 26000: the connection has no statement of that name (a new connection, or one the
# server reset, e.g. DISCARD ALL). The statement is prepared and the call sent once more.
_NOT_PREPARED = b"26000"
_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)


class WireStatement:
    """A named prepared statement (placeholders ``$1``..``$n``, text parameters) run on a
    psycopg async connection, under the connection's lock, with psycopg's own waiting (so a
    cancelled call cancels the query, as psycopg's does)."""

    __slots__ = ("_name", "_text")

    def __init__(self, name: str, text: str) -> None:
        self._name = name.encode()
        self._text = text.encode()

    async def execute(self, conn: psycopg.AsyncConnection[Any], params: Sequence[bytes | None]) -> None:
        pgconn = conn.pgconn
        async with conn.lock:
            pgconn.send_query_prepared(self._name, params)
            result = (await conn.wait(generators.execute(pgconn)))[-1]
            if result.status in _OK:
                return
            if result.error_field(pq.DiagnosticField.SQLSTATE) != _NOT_PREPARED:
                raise errors.error_from_result(result, encoding=conn.info.encoding)
            pgconn.send_prepare(self._name, self._text)
            result = (await conn.wait(generators.execute(pgconn)))[-1]
            if result.status not in _OK:
                raise errors.error_from_result(result, encoding=conn.info.encoding)
            pgconn.send_query_prepared(self._name, params)
            result = (await conn.wait(generators.execute(pgconn)))[-1]
            if result.status not in _OK:
                raise errors.error_from_result(result, encoding=conn.info.encoding)
