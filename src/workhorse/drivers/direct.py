"""One-off direct connections to PostgreSQL, outside any pool: what the CLI and the demo need
before (or after) an app's pools exist. psycopg stays behind the driver package."""

from __future__ import annotations

import psycopg
from psycopg import sql

from workhorse.drivers.pooler import connect_options
from workhorse.drivers.postgres_core import translated


def check_reachable(url: str) -> None:
    """Connect once, directly, before a command opens an app's connection pool.

    The pool retries a refused connection in the background until its 10 s timeout, logging
    every attempt to stderr, then reports only that it timed out. One direct connection fails at
    once with PostgreSQL's own reason (connection refused, no such database, password refused):
    DATABASE_UNAVAILABLE whose cause a person can act on, in well under a second.
    """
    with (
        translated(),
        psycopg.connect(url, **connect_options({"connect_timeout": 10, "application_name": "workhorse:cli"})),
    ):
        pass


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it (the demo's cleanup). Raises a ``DatabaseError``."""
    with (
        translated(),
        psycopg.connect(url, **connect_options({"autocommit": True, "application_name": "workhorse:cli"})) as conn,
    ):
        conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
