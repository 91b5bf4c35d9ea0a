"""The PostgreSQL driver: psycopg 3 with a connection pool per role.
``PostgresDriver`` is one mixin per role of the storage interface (``drivers/base.py``) over
``postgres_core``; a feature's role lives in that feature's folder (``steps/postgres``, ...).

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

from workhorse.drivers.postgres_core import PostgresCore
from workhorse.drivers.postgres_enqueue import PostgresEnqueue
from workhorse.drivers.postgres_operate import PostgresOperate
from workhorse.drivers.postgres_work import PostgresWork
from workhorse.health.postgres import PostgresHealth
from workhorse.leader.postgres import PostgresLeadership
from workhorse.outbox.postgres import PostgresOutbox
from workhorse.retention.postgres import PostgresRetention
from workhorse.steps.postgres import PostgresSteps


class PostgresDriver(
    PostgresEnqueue,
    PostgresWork,
    PostgresOperate,
    PostgresSteps,
    PostgresLeadership,
    PostgresRetention,
    PostgresOutbox,
    PostgresHealth,
    PostgresCore,
):
    """The default driver. ``role`` names the pool's connections (``workhorse:<role>``)."""

    kind = "postgres"


__all__ = ["PostgresDriver"]
