"""The PostgreSQL driver: psycopg 3 with a connection pool per role.

Each instance owns one async pool whose connections carry ``application_name`` ``workhorse:<role>``
(``app``, ``claim``, ``settle``, ``heartbeat``...), so an operator can find and kill one role's
backend. Connections run in autocommit: every statement is its own transaction, and no workhorse
connection ever sits ``idle in transaction`` while a job body runs. psycopg errors are translated
at this seam into ``DatabaseError``/``SchemaError``; nothing psycopg-shaped escapes.

``PostgresDriver`` is one mixin per role of the storage interface (``drivers/base.py``), each over
the shared internals of ``postgres_core``; the queue's own roles live beside it, a feature's role
in that feature's folder:

    postgres_core      PostgresCore: pool, hot connections, q(), fetch(), error translation; the schema role
    postgres_enqueue   PostgresEnqueue: the single enqueue on the wire, keyed batches, COPY streams, conn=
    postgres_work      PostgresWork: claim, heartbeat, the registry row, settle, progress; the wake-ups
    postgres_operate   PostgresOperate: get/list, the verbs, bulk verbs, pauses, snapshot, workers, folds
    steps/postgres     PostgresSteps: durable steps and stored events
    leader/postgres    PostgresLeadership: the scheduler's round, release, hand-over LISTEN, task rows
    outbox/postgres    PostgresOutbox: the relay's insert of staged rows under their own ids
    retention/postgres PostgresRetention: the purge, one small batch per statement
"""

from __future__ import annotations

from workhorse.drivers.postgres_core import PostgresCore
from workhorse.drivers.postgres_enqueue import PostgresEnqueue
from workhorse.drivers.postgres_operate import PostgresOperate
from workhorse.drivers.postgres_work import PostgresWork
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
    PostgresCore,
):
    """The default driver. ``role`` names the pool's connections (``workhorse:<role>``)."""

    kind = "postgres"


__all__ = ["PostgresDriver"]
