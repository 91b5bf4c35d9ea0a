"""The soak's own sessions (``soak-chaos``, ``soak-sampler``, ``soak-verify``...): autocommit,
reconnected on the next call after a failure. None is named ``workhorse:*``, so the chaos never
terminates them."""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

from soak import sql

FAILURES = (psycopg.OperationalError, psycopg.InterfaceError)


class Session:
    """One connection of the soak's own, opened lazily and again after it failed."""

    def __init__(self, url: str, schema: str, name: str) -> None:
        self.url = url
        self.schema = schema
        self.name = name
        self._conn: psycopg.Connection[dict[str, Any]] | None = None

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.url, autocommit=True, application_name=self.name, connect_timeout=5, row_factory=dict_row
            )
        return self._conn

    def rows(self, statement: LiteralString, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run one statement; its rows. A failure closes the session (the next call reconnects) and is raised."""
        try:
            cur = self._connection().execute(sql.q(statement, self.schema), params)
            return cur.fetchall() if cur.description else []
        except FAILURES:
            self.close()
            raise

    def one(self, statement: LiteralString, params: dict[str, Any] | None = None) -> dict[str, Any]:
        found = self.rows(statement, params)
        if not found:
            raise LookupError(f"no row from {statement.strip().splitlines()[0]!r}")
        return found[0]

    def raw(self) -> psycopg.Connection[dict[str, Any]]:
        return self._connection()

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
