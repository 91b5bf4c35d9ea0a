"""One statement sent through libpq directly, for the single enqueue.

Design: docs/how-it-works/architecture.md
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
