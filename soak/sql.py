"""Every statement the soak runs, as named constants. ``{schema}`` is the soak's own schema (a
generated identifier, never user input), filled in by ``q``.

The queue's tables (``jobs``, ``workers``) are workhorse's, migrated into that schema; the soak adds
two tables of its own beside them, which nothing in workhorse reads or writes:

* ``soak_enqueued``: one row per job, inserted in the transaction that enqueued it, so the set of
  jobs that exist is known from the database alone, even when a commit's answer was lost.
* ``soak_steps``: one row per execution of a durable step (``--flow``'s ``soak_steps`` job).
* ``soak_runs``: the ledger. A ``start`` row when a body begins and an end row (``ok``, ``fail``,
  ``cancelled``, ``error``) when it stops, written by the body on a session of its own.
"""

from __future__ import annotations

from typing import LiteralString


def q(statement: LiteralString, schema: str) -> LiteralString:
    """``statement`` with the soak's schema filled in (a generated identifier: see ``run.new_schema``)."""
    return statement.replace("{schema}", schema)  # mypy reads LiteralString as str


CLOCK = "select extract(epoch from clock_timestamp())::float8 as now"

DROP_SCHEMA = "drop schema if exists {schema} cascade"

# Only on the soak's own cluster. The embedded server runs with synchronous_commit off, and an
# immediate restart is a crash of its processes: it forgets the commits of the last few hundred
# milliseconds, acknowledged or not (the queue's and the ledger's alike), which would show as
# false losses. On, a commit has reached the kernel (fsync stays off) and survives a process crash.
# A database setting outranks the server's command line, and every new session reads it.
DURABLE_COMMITS = """
do $$ begin
    execute format('alter database %I set synchronous_commit = on', current_database());
end $$
"""

# For the soak's own writers (the ledger, the enqueuer) on any server.
DURABLE_SESSION = "-c synchronous_commit=on"

CREATE_LEDGER = """
create table {schema}.soak_enqueued (
    id        uuid        primary key,
    n         integer     not null unique,
    batch     integer     not null,
    source    text        not null,
    body      text        not null,
    ms        real        not null,
    fail_once boolean     not null,
    at        timestamptz not null default clock_timestamp()
);
create index soak_enqueued_batch_idx on {schema}.soak_enqueued (batch);
create table {schema}.soak_steps (
    seq     bigserial   primary key,
    job_id  uuid        not null,
    step    text        not null,
    attempt integer     not null,
    pid     integer     not null,
    at      timestamptz not null default clock_timestamp()
);
create table {schema}.soak_runs (
    seq          bigserial   primary key,
    run_id       uuid        not null,
    job_id       uuid        not null,
    n            integer     not null,
    attempt      integer     not null,
    pid          integer     not null,
    worker_id    text        not null,
    event        text        not null,
    at           timestamptz not null,
    entered_at   timestamptz,
    lock_ok      boolean,
    holder_pid   integer,
    holder_state text,
    lease_ok     boolean,
    lease_detail text,
    unique (run_id, event)
);
"""

# -- the enqueuer ----------------------------------------------------------------------------------

RECORD_ENQUEUED = """
insert into {schema}.soak_enqueued (id, n, batch, source, body, ms, fail_once)
select u.id, u.n, %(batch)s, %(source)s, u.body, u.ms, u.fail_once
from unnest(%(ids)s::uuid[], %(ns)s::int[], %(bodies)s::text[], %(ms)s::real[], %(fails)s::boolean[])
    as u(id, n, body, ms, fail_once)
"""

BATCH_LANDED = "select exists (select 1 from {schema}.soak_enqueued as e where e.batch = %(batch)s) as landed"

# -- the ledger, written by the job bodies (soak/soakapp.py) ---------------------------------------

TRY_LOCK = "select pg_try_advisory_lock(%(cls)s::int4, %(n)s::int4) as got"
UNLOCK = "select pg_advisory_unlock(%(cls)s::int4, %(n)s::int4) as released"

# Who holds the job's lock: the application_name of a ledger session is soak-ledger:<os pid>.
LOCK_HOLDER = """
select a.application_name as holder
from pg_locks as l
join pg_stat_activity as a on a.pid = l.pid
where l.locktype = 'advisory' and l.granted
  and l.database = (select d.oid from pg_database as d where d.datname = current_database())
  and l.classid = %(cls)s::int4::oid and l.objid = %(n)s::int4::oid and l.objsubid = 2
  and l.pid <> pg_backend_pid()
limit 1
"""

# ``entered_ago``: seconds since the worker called the body (the start row follows the lock).
# The start row checks, in the same statement, that the job's lease is still this run's: held by
# its worker, for its attempt, and not expired. A run that starts without it is a "stale start".
START_RUN = """
insert into {schema}.soak_runs
    (run_id, job_id, n, attempt, pid, worker_id, event, at, entered_at, lock_ok, holder_pid, holder_state,
     lease_ok, lease_detail)
select %(run)s, %(job)s, %(n)s, %(attempt)s, %(pid)s, %(worker)s, 'start', clock_timestamp(),
       clock_timestamp() - %(entered_ago)s * interval '1 second', %(lock_ok)s, %(holder_pid)s, %(holder_state)s,
       coalesce(j.state = 'running' and j.worker_id = %(worker)s and j.attempt = %(attempt)s
                and j.lease_expires_at > clock_timestamp(), false),
       coalesce(j.state || ' by ' || coalesce(j.worker_id, '-') || ' attempt ' || j.attempt || ', lease '
                || coalesce(round(extract(epoch from j.lease_expires_at - clock_timestamp())::numeric, 3)::text, '-')
                || 's left', 'no such job')
from (select 1) as one
left join {schema}.jobs as j on j.id = %(job)s
on conflict (run_id, event) do nothing
"""

RECORD_STEP = """
insert into {schema}.soak_steps (job_id, step, attempt, pid) values (%(job)s, %(step)s, %(attempt)s, %(pid)s)
"""

# ``ago``: seconds since the body actually stopped, so a row written late (the server was
# restarting) still carries the moment the work ended.
END_RUN = """
insert into {schema}.soak_runs (run_id, job_id, n, attempt, pid, worker_id, event, at)
values (%(run)s, %(job)s, %(n)s, %(attempt)s, %(pid)s, %(worker)s, %(event)s,
        clock_timestamp() - %(ago)s * interval '1 second')
on conflict (run_id, event) do nothing
"""

# -- the conductor and the sampler ----------------------------------------------------------------

REGISTRY = """
select w.pid, w.id, extract(epoch from clock_timestamp() - w.last_seen_at)::float8 as age,
       w.expires_at < clock_timestamp() as expired, extract(epoch from clock_timestamp())::float8 as now
from {schema}.workers as w
"""

# How long the longest-waiting job has waited for a worker: a due job since it became due (its
# run_at, or its last change: a hand-back keeps the run_at it had), a running job whose lease
# lapsed since the lapse.
DUE_WAIT = """
select coalesce(extract(epoch from clock_timestamp() - min(w.since))::float8, 0) as waited
from (
    select greatest(j.run_at, j.updated_at) as since
    from {schema}.jobs as j
    where j.state in ('ready', 'delayed') and j.run_at <= clock_timestamp()
    union all
    select j.lease_expires_at
    from {schema}.jobs as j
    where j.state = 'running' and j.lease_expires_at < clock_timestamp()
) as w
"""

# Running rows per worker process, most first: whom to freeze right after a burst.
HOLDINGS = """
select w.pid, count(*) as held
from {schema}.jobs as j
join {schema}.workers as w on w.id = j.worker_id
where j.state = 'running'
group by w.pid
order by held desc
"""

HELD_BY = """
select j.id::text as id
from {schema}.jobs as j
join {schema}.workers as w on w.id = j.worker_id
where j.state = 'running' and w.pid = %(pid)s
"""

RUNNING = "select j.id::text as id from {schema}.jobs as j where j.state = 'running'"

# Only the fleet's own queue sessions: workhorse:* names, from the fleet's client ports. The
# ledger (soak-ledger:*) and the soak's own sessions are spared, so the ledger stays whole.
TERMINATE_FLEET = """
select count(pg_terminate_backend(a.pid)) as terminated
from pg_stat_activity as a
where a.datname = current_database()
  and a.application_name like 'workhorse:%%'
  and a.client_port = any(%(ports)s::int[])
  and a.pid <> pg_backend_pid()
"""

PROGRESS = """
select count(*) as jobs,
       count(*) filter (where j.state in ('done', 'dead')) as terminal
from {schema}.soak_enqueued as e
left join {schema}.jobs as j on j.id = e.id
"""

# Running jobs whose lease lapsed: how many lapsed more than %(bound)s seconds ago (the lease plus
# the rescue bound: workhorse.leader.rescue), and how long ago the oldest lapsed.
LAPSED = """
select count(*) filter (where j.lease_expires_at < clock_timestamp() - %(bound)s * interval '1 second') as past,
       coalesce(extract(epoch from clock_timestamp() - min(j.lease_expires_at))::float8, 0) as oldest,
       extract(epoch from clock_timestamp())::float8 as now
from {schema}.jobs as j
where j.state = 'running' and j.lease_expires_at < clock_timestamp()
"""

# -- the verifier ---------------------------------------------------------------------------------

STEPS = """
select s.job_id::text as job_id, s.step, count(*) as runs
from {schema}.soak_steps as s
group by s.job_id, s.step
"""

FINAL_JOBS = """
select e.id::text as id, e.n, e.source, e.body, e.fail_once, j.state, j.attempt,
       extract(epoch from j.finished_at)::float8 as finished_at,
       j.last_error ->> 'type' as error_type, j.last_error ->> 'message' as error_message
from {schema}.soak_enqueued as e
left join {schema}.jobs as j on j.id = e.id
"""

LEDGER = """
select r.run_id::text as run_id, r.job_id::text as job_id, r.attempt, r.pid, r.worker_id, r.event,
       extract(epoch from r.at)::float8 as at, extract(epoch from r.entered_at)::float8 as entered_at,
       r.lock_ok, r.holder_pid, r.holder_state, r.lease_ok, r.lease_detail
from {schema}.soak_runs as r
order by r.at, r.seq
"""
