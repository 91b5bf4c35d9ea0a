"""Statements of the transactional outbox: the staging table in a source database (stage, the
relay's claim, mark and release, the retention purge, its own migration ledger) and the one
statement the relay runs in the queue (ENQUEUE_STAGED).

Design: docs/guides/outbox.md
"""

from workhorse._db.queries.jobs import timed_rows

# -- the source's own migrations -----------------------------------------------------------------

# Serialises concurrent `outbox migrate` runs on one source. Transaction-scoped.
LOCK = "select pg_advisory_xact_lock(hashtext('workhorse:outbox:migrate:' || %(schema)s))"

CREATE_SCHEMA = "create schema if not exists {schema}"

CREATE_LEDGER = """
create table if not exists {schema}.outbox_migrations (
    version    integer     primary key,
    name       text        not null,
    applied_at timestamptz not null default now()
)
"""

APPLIED = "select version from {schema}.outbox_migrations order by version"

RECORD = "insert into {schema}.outbox_migrations (version, name) values (%(version)s, %(name)s)"

# Answers null, not an error, when the table is missing: the relay's refusal names the fix.
TABLE_EXISTS = "select to_regclass(%(table)s) is not null as present"

# -- staging, on the caller's connection ----------------------------------------------------------

# One row per job, as parallel arrays. The NOTIFY is sent at COMMIT (never for a rolled-back
# transaction), one per statement whatever the batch's size, and skipped when the notification
# queue is half full: a full queue would make the caller's COMMIT fail, and a missed wake costs
# the relay only a poll. Positional: the caller's connection may have any row factory.
STAGE = """
with staged as (
    insert into {schema}.outbox (
        id, name, queue, tenant, payload, idempotency_key, priority, max_attempts, dead_letter,
        run_at, delay, flow_key, traceparent
    )
    select t.id, t.name, t.queue, t.tenant, t.payload::jsonb, t.key, t.priority, t.max_attempts, t.dead_letter,
           t.run_at, t.delay, t.flow_key, t.traceparent
    from unnest(
        %(ids)s::uuid[], %(names)s::text[], %(queues)s::text[], %(tenants)s::text[], %(payloads)s::text[],
        %(keys)s::text[], %(priorities)s::int[], %(max_attempts)s::int[], %(dead_letters)s::bool[],
        %(run_ats)s::timestamptz[], %(delays)s::float8[], %(flow_keys)s::text[], %(traceparents)s::text[]
    ) as t(id, name, queue, tenant, payload, key, priority, max_attempts, dead_letter, run_at, delay, flow_key,
           traceparent)
    returning 1 as one
)
select (select count(*) from staged) as staged,
       (select count(*) from (select pg_notify(%(channel)s, 'staged') where pg_notification_queue_usage() < 0.5)
        as wake) as woken
"""

# -- the relay, on its own connection to the source -------------------------------------------------

# The channel STAGE notifies (workhorse.outbox.outbox_channel): the schema is a checked identifier.
LISTEN = "listen {schema}_outbox"

# A batch of pending rows, oldest first (outbox_pending_idx), that no relay holds: never leased, or
# its lease lapsed (the relay that took it died or lost the source). FOR UPDATE SKIP LOCKED: two
# relays claiming at once take disjoint rows and never wait on each other; the lease then keeps the
# rows theirs after this statement's transaction ends. A delay counts from staged_at on this
# database's clock: the answer carries what is left of it, so the queue's clock adds it to its own
# now() and the two clocks never need to agree.
CLAIM = """
with picked as (
    select o.id
    from {schema}.outbox as o
    where o.published_at is null and (o.lease_expires_at is null or o.lease_expires_at <= now())
    order by o.id
    limit %(batch)s
    for update skip locked
)
update {schema}.outbox as o
set claims = o.claims + 1, relay_id = %(relay_id)s,
    lease_expires_at = now() + %(lease)s::float8 * interval '1 second'
from picked
where o.id = picked.id
returning o.id::text as id, o.name, o.queue, o.tenant, o.payload::text as payload, o.idempotency_key,
          o.priority, o.max_attempts, o.dead_letter, o.run_at,
          greatest(0, extract(epoch from (o.staged_at + o.delay * interval '1 second' - now())))::float8 as delay,
          o.flow_key, o.traceparent
"""

# After the queue committed the batch: each row keeps its outcome and when; the lease is done.
# `published_at is null` keeps the first mark when two relays moved one row (a lapsed lease).
MARK_PUBLISHED = """
update {schema}.outbox as o
set published_at = now(), outcome = t.outcome, lease_expires_at = null
from unnest(%(ids)s::uuid[], %(outcomes)s::text[]) as t(id, outcome)
where o.id = t.id and o.published_at is null
"""

# A batch the queue refused (the queue was unreachable): hand the rows back at once rather than
# leave them to their lease, fenced on this relay still holding them.
RELEASE = """
update {schema}.outbox as o
set lease_expires_at = null
from unnest(%(ids)s::uuid[]) as t(id)
where o.id = t.id and o.published_at is null and o.relay_id = %(relay_id)s
"""

# Retention: published rows older than the age, oldest first (outbox_published_idx), a bounded
# batch a statement, SKIP LOCKED so two relays purging one source never wait on each other.
# Pending rows are never candidates, however old.
PURGE_PUBLISHED = """
with doomed as (
    select o.id
    from {schema}.outbox as o
    where o.published_at is not null and o.published_at < now() - %(age)s::float8 * interval '1 second'
    order by o.published_at
    limit %(batch)s
    for update skip locked
)
delete from {schema}.outbox as o
using doomed
where o.id = doomed.id
"""

# What `workhorse relay` and the tests read: pending and published rows of a source.
BACKLOG = """
select count(*) filter (where published_at is null) as pending,
       count(*) filter (where published_at is not null) as published
from {schema}.outbox
"""

# -- the relay's statements in the queue -------------------------------------------------------------

# A claimed batch into the jobs table, the staged id as the job's id: the relay's one round trip in
# the queue. The batch's ids go first into the tombstones ({schema}.outbox_received, migration 016),
# ON CONFLICT DO NOTHING; only the ids newly received there are inserted into jobs. So a row moved
# before (by a relay that died before marking it, or by a second relay after a lapsed lease) inserts
# nothing even when its job is long gone (finished and purged, or removed). Two relays moving one id
# at once serialise on the tombstone's primary key: the second waits for the first's commit, then
# conflicts. The jobs insert keeps ON CONFLICT DO NOTHING for the live key index (a live job holds
# the row's idempotency key, as enqueue honours it). Each row answers its outcome: `enqueued`
# (received and inserted now), `present` (received before: nothing twice; or, for a row moved before
# the tombstones existed, its id still a job) or `duplicate` (newly received, nothing inserted: a
# live job of the same name and tenant holds its key).
ENQUEUE_STAGED = (
    "\n"
    + timed_rows()
    + """, received as (
    insert into {schema}.outbox_received (id)
    select id from timed
    on conflict do nothing
    returning id
), inserted as (
    insert into {schema}.jobs (
        id, name, queue, tenant, state, priority, payload, idempotency_key,
        max_attempts, dead_letter, run_at, flow_key, traceparent
    )
    select timed.id, timed.name, timed.queue, timed.tenant,
           case when timed.due > now() then 'delayed' else 'ready' end,
           timed.priority, timed.payload::jsonb, timed.key, timed.max_attempts, timed.dead_letter, timed.due,
           timed.flow_key, timed.traceparent
    from timed
    join received on received.id = timed.id
    on conflict do nothing
    returning id, queue, state
), wake as (
    select pg_notify(%(channel)s, case when q.later then 'sweep:' || q.queue else q.queue end)
    from (select distinct queue, state = 'delayed' as later from inserted) as q
    where pg_notification_queue_usage() < 0.5
)
select timed.id::text as id,
       case when inserted.id is not null then 'enqueued'
            when received.id is null then 'present'
            when exists (select 1 from {schema}.jobs as j where j.id = timed.id) then 'present'
            else 'duplicate' end as outcome,
       (select count(*) from wake) as woken
from timed
left join received on received.id = timed.id
left join inserted on inserted.id = timed.id
"""
)

# Retention of the tombstones: those received longer ago than the age, oldest first
# (outbox_received_at_idx), a bounded batch a statement, SKIP LOCKED so two relays never wait on
# each other. The relay's age is never less than its sources' retention (nor 7 days).
PURGE_RECEIVED = """
with doomed as (
    select r.id
    from {schema}.outbox_received as r
    where r.received_at < now() - %(age)s::float8 * interval '1 second'
    order by r.received_at
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.outbox_received as r
    using doomed
    where r.id = doomed.id
    returning 1 as one
)
select count(*) as removed from gone
"""
