"""The PostgreSQL driver: psycopg 3 with a connection pool per role.

Each instance owns one async pool whose connections carry ``application_name`` ``workhorse:<role>``
(``app``, ``claim``, ``settle``, ``heartbeat``...), so an operator can find and kill one role's
backend. Connections run in autocommit: every statement is its own transaction, and no workhorse
connection ever sits ``idle in transaction`` while a job body runs. psycopg errors are translated
at this seam into ``DatabaseError``/``SchemaError``; nothing psycopg-shaped escapes.

``PostgresDriver`` is one mixin per role of the contract (``drivers/base.py``), each in a sibling
module over the shared internals of ``postgres_core``; none imports this module back:

    postgres_core      PostgresCore: pool, hot connections, q(), fetch(), error translation; the schema role
    postgres_enqueue   PostgresEnqueue: the single enqueue on the wire, keyed batches, COPY streams, conn=
    postgres_work      PostgresWork: claim, heartbeat, the registry row, settle, progress; the wake-ups
    postgres_operate   PostgresOperate: get/list, the verbs, bulk verbs, pauses, snapshot, workers, folds
    steps/postgres     PostgresSteps: durable steps and stored events
    leader/postgres    PostgresLeadership: the scheduler's round, release, hand-over LISTEN, task rows
    postgres_retention PostgresRetention: the purge, one small batch per statement
    outbox/postgres    PostgresOutbox: the relay's insert of staged rows under their own ids

Every name this module defined before that split is still importable from it.
"""

from __future__ import annotations

from workhorse.drivers.postgres_core import (
    _SCHEMA_NAME,
    _UUID,
    HOT_CONNECTIONS,
    HOT_USES,
    PostgresCore,
    _Borrowed,
    _is_uuid,
    _numbered,
    check_schema_name,
    jobs_channel,
    translate,
    translated,
)
from workhorse.drivers.postgres_enqueue import (
    _COPY_ESCAPES,
    COPY_CHUNK,
    COPY_THRESHOLD,
    PostgresEnqueue,
    Statement,
    _bad_conn,
    _Batch,
    _Copied,
    _copy_field,
    _copy_line,
    _copyable,
    _insert_params,
    _key_of,
    _key_race,
    _on_callers,
    _plain,
    _wire_text,
)
from workhorse.drivers.postgres_operate import BULK_TRIES, SHOWN_LIMIT, PostgresOperate, _id_range, _job, _shown
from workhorse.drivers.postgres_retention import PostgresRetention
from workhorse.drivers.postgres_work import _ARRAY_ESCAPES, PostgresWork, pg_array
from workhorse.leader.postgres import PostgresLeadership
from workhorse.outbox.postgres import PostgresOutbox
from workhorse.steps.postgres import PURGE_BATCH, PostgresSteps, _answer, _fence, _published


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


__all__ = [
    "BULK_TRIES",
    "COPY_CHUNK",
    "COPY_THRESHOLD",
    "HOT_CONNECTIONS",
    "HOT_USES",
    "PURGE_BATCH",
    "SHOWN_LIMIT",
    "_ARRAY_ESCAPES",
    "_COPY_ESCAPES",
    "_SCHEMA_NAME",
    "_UUID",
    "PostgresDriver",
    "Statement",
    "_Batch",
    "_Borrowed",
    "_Copied",
    "_answer",
    "_bad_conn",
    "_copy_field",
    "_copy_line",
    "_copyable",
    "_fence",
    "_id_range",
    "_insert_params",
    "_is_uuid",
    "_job",
    "_key_of",
    "_key_race",
    "_numbered",
    "_on_callers",
    "_plain",
    "_published",
    "_shown",
    "_wire_text",
    "check_schema_name",
    "jobs_channel",
    "pg_array",
    "translate",
    "translated",
]
