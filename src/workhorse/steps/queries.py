"""Statements over ``{schema}.steps`` and ``{schema}.events``: durable steps, suspension, events.

Design: docs/guides/steps.md
"""

# Serialises a wait and a publish on one (event name, key) within a schema. Taken in its own
# statement, first in the transaction, so the next statement's snapshot sees whatever the
# previous holder committed. The two-key form never collides with the migrator's one-key lock.
EVENT_LOCK = """
select pg_advisory_xact_lock(
    hashtext('{schema}.events'),
    hashtext(%(name)s::text || chr(31) || coalesce(%(key)s::text, ''))
)
"""

# A run's recorded steps, in position order: the ONE read a run hydrates its replay from.
LIST = """
select s.name, s.seq, s.state, s.result, s.error, s.attempt, s.started_at, s.finished_at,
       s.wake_at, s.event, s.event_key
from {schema}.steps as s
where s.job_id = %(job_id)s::uuid
order by s.seq, s.started_at
"""

# What `show` lists: results over 1,000 characters are trimmed in the database, so a job whose
# steps hold large documents costs a page of text, not the documents.
LIST_SHOWN = """
select s.name, s.seq, s.state, s.attempt, s.started_at, s.finished_at, s.wake_at, s.event, s.event_key,
       case when length(s.result::text) <= %(limit)s then s.result end as result,
       case when length(s.result::text) > %(limit)s then left(s.result::text, %(limit)s) end as result_preview,
       s.error ->> 'type' as error_type,
       left(s.error ->> 'message', %(limit)s) as error_message
from {schema}.steps as s
where s.job_id = %(job_id)s::uuid
order by s.seq, s.started_at
"""

# Record a finished step (done or failed), fenced on the claim. `started_at` is the database
# clock minus the step's measured duration: no worker wall clock is ever stored. The upsert only
# replaces a FAILED row (a later run of the step); a done row is never overwritten.
PUT = """
with job as (
    select j.id, j.attempt
    from {schema}.jobs as j
    where j.id = %(job_id)s::uuid and j.state = 'running'
      and j.worker_id = %(worker_id)s and j.claims = %(claims)s
    for share
)
insert into {schema}.steps as s (job_id, name, seq, state, result, error, attempt, started_at, finished_at)
select job.id, %(name)s, %(seq)s, %(state)s, %(result)s::jsonb, %(error)s::jsonb, job.attempt,
       statement_timestamp() - %(elapsed)s * interval '1 second', statement_timestamp()
from job
on conflict (job_id, name) do update
set seq = excluded.seq, state = excluded.state, result = excluded.result, error = excluded.error,
    attempt = excluded.attempt, started_at = excluded.started_at, finished_at = excluded.finished_at
where s.state = 'failed'
returning s.state
"""

# Record or resume a sleep, and suspend the job in the SAME statement when it is not over yet:
# the row leaves the worker ('suspended' until wake_at, which the claim's due arm picks up), the
# attempt is handed back (the claim spends it again on resume), no last_error is written. A
# recorded sleep keeps its first wake_at, so a resumed run never sleeps twice. `until` (absolute)
# wins over `delay` (seconds from the database's now).
SLEEP = """
with job as (
    select j.id, j.attempt
    from {schema}.jobs as j
    where j.id = %(job_id)s::uuid and j.state = 'running'
      and j.worker_id = %(worker_id)s and j.claims = %(claims)s
    for no key update
), prior as (
    select s.started_at, s.wake_at
    from {schema}.steps as s join job on s.job_id = job.id
    where s.name = %(name)s and s.state = 'sleeping'
), timing as (
    select coalesce((select prior.started_at from prior), statement_timestamp()) as since,
           coalesce((select prior.wake_at from prior), %(until)s::timestamptz,
                    statement_timestamp() + %(delay)s::float8 * interval '1 second') as wake_at
), step as (
    insert into {schema}.steps as s (job_id, name, seq, state, attempt, started_at, finished_at, wake_at)
    select job.id, %(name)s, %(seq)s,
           case when timing.wake_at <= statement_timestamp() then 'done' else 'sleeping' end,
           job.attempt, timing.since,
           case when timing.wake_at <= statement_timestamp() then statement_timestamp() end,
           timing.wake_at
    from job cross join timing
    on conflict (job_id, name) do update
    set state = excluded.state, finished_at = excluded.finished_at, attempt = excluded.attempt
    where s.state = 'sleeping'
    returning s.state, s.wake_at
), suspended as (
    update {schema}.jobs as j
    set state = 'suspended', run_at = step.wake_at, attempt = greatest(j.attempt - 1, 0),
        worker_id = null, lease_expires_at = null, updated_at = statement_timestamp()
    from step
    where j.id = %(job_id)s::uuid and step.state = 'sleeping'
    returning j.id
)
select step.state, step.wake_at, null::jsonb as result, false as matched,
       (select count(*) from suspended) as suspended
from step
"""

# Record or resume a wait (after EVENT_LOCK, in one transaction). The wait began when the run
# first reached it (`started_at`, kept across resumes); it is answered by the EARLIEST unexpired
# event of (name, key) published at or after that (events_match_idx), or by null once the
# deadline passed. Otherwise the job is suspended until the deadline in this same statement,
# exactly as SLEEP does; PUBLISH wakes it sooner.
WAIT = """
with job as (
    select j.id, j.attempt
    from {schema}.jobs as j
    where j.id = %(job_id)s::uuid and j.state = 'running'
      and j.worker_id = %(worker_id)s and j.claims = %(claims)s
    for no key update
), prior as (
    select s.started_at, s.wake_at
    from {schema}.steps as s join job on s.job_id = job.id
    where s.name = %(name)s and s.state = 'waiting'
), timing as (
    select coalesce((select prior.started_at from prior), statement_timestamp()) as since,
           coalesce((select prior.wake_at from prior),
                    statement_timestamp() + %(timeout)s::float8 * interval '1 second') as deadline
), found as (
    select e.payload
    from {schema}.events as e cross join timing
    where e.name = %(event)s and coalesce(e.key, '') = coalesce(%(key)s::text, '')
      and e.published_at >= timing.since and e.expires_at > statement_timestamp()
    order by e.published_at, e.id
    limit 1
), outcome as (
    select exists (select 1 from found) as matched,
           (select found.payload from found) as payload,
           timing.since, timing.deadline
    from timing
), step as (
    insert into {schema}.steps as s (
        job_id, name, seq, state, result, attempt, started_at, finished_at, wake_at, event, event_key
    )
    select job.id, %(name)s, %(seq)s,
           case when outcome.matched or outcome.deadline <= statement_timestamp() then 'done' else 'waiting' end,
           outcome.payload, job.attempt, outcome.since,
           case when outcome.matched or outcome.deadline <= statement_timestamp() then statement_timestamp() end,
           outcome.deadline, %(event)s, %(key)s::text
    from job cross join outcome
    on conflict (job_id, name) do update
    set state = excluded.state, result = excluded.result, finished_at = excluded.finished_at,
        attempt = excluded.attempt
    where s.state = 'waiting'
    returning s.state, s.result, s.wake_at
), suspended as (
    update {schema}.jobs as j
    set state = 'suspended', run_at = step.wake_at, attempt = greatest(j.attempt - 1, 0),
        worker_id = null, lease_expires_at = null, updated_at = statement_timestamp()
    from step
    where j.id = %(job_id)s::uuid and step.state = 'waiting'
    returning j.id
)
select step.state, step.wake_at, step.result, outcome.matched, (select count(*) from suspended) as suspended
from step cross join outcome
"""

# Store an event (after EVENT_LOCK, in one transaction) and, in the same statement, move every
# job suspended on a matching wait that began at or before it to 'ready' (steps_waiting_idx),
# then NOTIFY each of their queues so workers claim at once rather than at their next poll. A
# job already woken is 'ready', not 'suspended': a second publish never wakes it twice.
PUBLISH = """
with event as (
    insert into {schema}.events (name, key, payload, published_at, expires_at)
    values (%(name)s, %(key)s::text, %(payload)s::jsonb, statement_timestamp(),
            statement_timestamp() + %(ttl)s::float8 * interval '1 second')
    returning id, published_at, expires_at
), woken as (
    update {schema}.jobs as j
    set state = 'ready', run_at = now(), updated_at = now()
    from {schema}.steps as s cross join event
    where s.state = 'waiting' and s.event = %(name)s and coalesce(s.event_key, '') = coalesce(%(key)s::text, '')
      and s.started_at <= event.published_at
      and j.id = s.job_id and j.state = 'suspended'
    returning j.id, j.queue
), wake as (
    select pg_notify(%(channel)s, q.queue)
    from (select distinct woken.queue from woken) as q
    where pg_notification_queue_usage() < 0.5
)
select event.id::text as id, event.published_at, event.expires_at,
       (select count(*) from woken) as woken, (select count(*) from wake) as notified
from event
"""

# Housekeeping for the retention job: one small batch of expired events (events_expires_idx),
# skipping rows another purge holds. Callers loop until a batch comes back short. An expired
# row left behind never answers a wait: WAIT reads only unexpired events.
PURGE_EXPIRED = """
with doomed as (
    select e.id
    from {schema}.events as e
    where e.expires_at <= now()
    order by e.expires_at
    limit %(batch)s
    for update skip locked
), removed as (
    delete from {schema}.events as e
    using doomed
    where e.id = doomed.id
    returning e.id
)
select count(*) as removed from removed
"""
