"""``conn=``: enqueue inside the caller's transaction, whatever tool opened it.

Design: docs/guides/transactions.md
"""

from __future__ import annotations

import sys
from typing import Any

from workhorse.errors import ConfigurationError

ACCEPTED = (
    "a psycopg 3 Connection/AsyncConnection, a SQLAlchemy 2 Connection/Session/AsyncConnection/AsyncSession, "
    "or django.db.connection"
)


def _psycopg(conn: Any) -> bool:
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(conn, psycopg.Connection | psycopg.AsyncConnection)


async def driver_connection(conn: Any) -> Any:
    """The psycopg connection behind ``conn`` (None stays None), for ``await enqueue``."""
    if conn is None or _psycopg(conn):
        return conn
    if "sqlalchemy.ext.asyncio" in sys.modules:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncSession):
            conn = await conn.connection()
        if isinstance(conn, AsyncConnection):
            if not conn.in_transaction():  # reaching past it begins nothing: its commit() would then
                await conn.begin()  # commit nothing, and the pool roll the job back on release
            raw = await conn.get_raw_connection()
            return _checked(raw.driver_connection, "a SQLAlchemy AsyncConnection")
    return _unwrap_sync(conn)


def driver_connection_sync(conn: Any) -> Any:
    """The psycopg connection behind ``conn``, for ``enqueue_sync``."""
    if conn is None or _psycopg(conn):
        return conn
    if "sqlalchemy.ext.asyncio" in sys.modules:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncConnection | AsyncSession):
            raise ConfigurationError(
                code="CONN_INVALID",
                cause=f"enqueue_sync was given a SQLAlchemy {type(conn).__name__}, which only async code can use",
                fix="await job.enqueue(payload, conn=session) from async code, or pass a sync Session",
            )
    return _unwrap_sync(conn)


def _unwrap_sync(conn: Any) -> Any:
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        if isinstance(conn, Session):
            conn = conn.connection()  # begins the session's transaction if none is open yet
        if isinstance(conn, Connection):
            if not conn.in_transaction():  # as a statement of its own would (autobegin), so that
                conn.begin()  # the caller's commit() commits the job and a rollback drops it
            return _checked(conn.connection.driver_connection, "a SQLAlchemy Connection")
    if "django.db" in sys.modules:
        wrapper = _django_wrapper(conn)
        if wrapper is not None:
            return _django(wrapper)
    raise ConfigurationError(
        code="CONN_INVALID",
        cause=f"conn= was given a {type(conn).__module__}.{type(conn).__qualname__}; it takes {ACCEPTED}",
        fix="pass the connection (or session) whose transaction the job must join: enqueue(payload, conn=session)",
    )


def _django_wrapper(conn: Any) -> Any:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.utils.connection import ConnectionProxy

    if isinstance(conn, ConnectionProxy):  # django.db.connection: the default alias's wrapper
        from django.db import connections

        conn = connections[conn._alias]
    return conn if isinstance(conn, BaseDatabaseWrapper) else None


def _django(wrapper: Any) -> Any:
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            code="CONN_INVALID",
            cause=f"conn= was given Django's {wrapper.alias!r} connection on the {wrapper.vendor} backend",
            fix="point DATABASES at PostgreSQL (ENGINE 'django.db.backends.postgresql', with psycopg 3 installed)",
        )
    wrapper.ensure_connection()  # Django opens its connection lazily
    return _checked(wrapper.connection, f"Django's {wrapper.alias!r} connection")


def _checked(raw: Any, what: str) -> Any:
    if _psycopg(raw):
        return raw
    found = f"{type(raw).__module__}.{type(raw).__qualname__}"
    raise ConfigurationError(
        code="CONN_INVALID",
        cause=f"conn= was given {what} whose database driver is {found}, not psycopg 3",
        fix="use psycopg 3 underneath: SQLAlchemy create_engine('postgresql+psycopg://...'); "
        "Django: pip install 'psycopg[binary]' (Django picks psycopg 3 when it is installed)",
    )
