"""The leader's statements: the scheduler role's over ``{schema}.leaders`` and ``{schema}.tasks``, and
the rescue of lapsed leases (``RESCUE``, at the end).

Design: docs/guides/cron.md
"""

from workhorse._db.queries.jobs import BURY_LAPSED, CLAIM_RETURNING, release_cte, wake_cte

# One round. Parameters: the holder's identity and lease length; the epoch the fires were planned
# under (null when not leading); the planned fires as parallel arrays (task, occurrence, the
# watermark read, the next occurrence, and the job row as INSERT_MANY writes it); the declarations
# to register (tasks the last read did not show, or showed with another schedule); every task name
# this process declares, to read back.
ROUND = """
with lease as (
    -- take the lease when it is free or lapsed, renew it when it is ours. A lapsed lease (ours or
    -- not) is taken under a new epoch, so plans made under the old one are fenced out.
    insert into {schema}.leaders as l (role, holder, epoch, host, pid, acquired_at, renewed_at, expires_at)
    values ('scheduler', %(holder)s::text, 1, %(host)s::text, %(pid)s::int, now(), now(),
            now() + %(ttl)s::float8 * interval '1 second')
    on conflict (role) do update
    set epoch = case when l.holder = excluded.holder and l.expires_at > now() then l.epoch else l.epoch + 1 end,
        acquired_at = case when l.holder = excluded.holder and l.expires_at > now() then l.acquired_at
                           else now() end,
        holder = excluded.holder, host = excluded.host, pid = excluded.pid,
        renewed_at = now(), expires_at = excluded.expires_at
    where l.holder = excluded.holder or l.expires_at <= now()
    returning l.holder, l.epoch, l.expires_at
), fenced as (
    -- fires land only under the epoch they were planned with, renewed by this statement
    select 1 as ok from lease where lease.epoch = %(epoch)s::bigint
), planned as (
    select p.name, p.occurrence, p.prev, p.next_at, p.id, p.queue, p.tenant, p.payload, p.key,
           p.priority, p.max_attempts, p.dead_letter
    from unnest(
        %(f_names)s::text[], %(f_occurrences)s::timestamptz[], %(f_prevs)s::timestamptz[],
        %(f_next_ats)s::timestamptz[], %(f_ids)s::uuid[], %(f_queues)s::text[], %(f_tenants)s::text[],
        %(f_payloads)s::text[], %(f_keys)s::text[], %(f_priorities)s::int[], %(f_max_attempts)s::int[],
        %(f_dead_letters)s::bool[]
    ) as p(name, occurrence, prev, next_at, id, queue, tenant, payload, key, priority, max_attempts, dead_letter)
), moved as (
    -- the fire: compare-and-set of the watermark from the value planned with, never backwards,
    -- never before the occurrence on the database clock
    update {schema}.tasks as t
    set watermark = p.occurrence, next_at = p.next_at, last_fired_at = now(), last_job_id = p.id,
        fired = t.fired + 1, updated_at = now()
    from planned as p
    where t.name = p.name and t.watermark = p.prev and p.occurrence > t.watermark and p.occurrence <= now()
      and exists (select 1 from fenced)
    returning t.name, t.watermark, p.id
), inserted as (
    -- the job rides the move: inserted only where the watermark moved, as INSERT_MANY writes it;
    -- a live job already holding the occurrence key makes this a no-op, never a second job
    insert into {schema}.jobs (
        id, name, queue, tenant, state, priority, payload, idempotency_key, max_attempts, dead_letter, run_at
    )
    select p.id, p.name, p.queue, p.tenant, 'ready', p.priority, p.payload::jsonb, p.key, p.max_attempts,
           p.dead_letter, now()
    from planned as p
    where exists (select 1 from moved where moved.id = p.id)
    on conflict do nothing
    returning id, queue
), wake as (
    -- NOTIFY is a hint for idle workers, skipped when the server queue is half full
    select pg_notify(%(channel)s::text, q.queue)
    from (select distinct queue from inserted) as q
    where pg_notification_queue_usage() < 0.5
), declared as (
    select d.name, d.schedule, d.timezone, d.catch_up, d.next_at
    from unnest(
        %(d_names)s::text[], %(d_schedules)s::text[], %(d_timezones)s::text[], %(d_catch_ups)s::text[],
        %(d_next_ats)s::timestamptz[]
    ) as d(name, schedule, timezone, catch_up, next_at)
), registered as (
    -- only the lease holder registers. A new task starts with its watermark at now(): nothing
    -- before its first sighting is owed. A changed declaration keeps its watermark. Rows this
    -- statement fires are left alone (a row may be modified once per statement).
    insert into {schema}.tasks as t (name, schedule, timezone, catch_up, watermark, next_at)
    select d.name, d.schedule, d.timezone, d.catch_up, now(), d.next_at
    from declared as d
    where exists (select 1 from lease) and not exists (select 1 from planned where planned.name = d.name)
    on conflict (name) do update
    set schedule = excluded.schedule, timezone = excluded.timezone, catch_up = excluded.catch_up,
        next_at = excluded.next_at, updated_at = now()
    where (t.schedule, t.timezone, t.catch_up)
          is distinct from (excluded.schedule, excluded.timezone, excluded.catch_up)
    returning t.name, t.schedule, t.timezone, t.catch_up, t.watermark
), state as (
    -- what the next round plans from, as it stands after this statement; read by the holder only
    select n.name,
           coalesce(m.watermark, r.watermark, t.watermark) as watermark,
           coalesce(r.schedule, t.schedule) as schedule,
           coalesce(r.timezone, t.timezone) as timezone,
           coalesce(r.catch_up, t.catch_up) as catch_up
    from unnest(%(names)s::text[]) as n(name)
    left join {schema}.tasks as t on t.name = n.name
    left join moved as m on m.name = n.name
    left join registered as r on r.name = n.name
    where exists (select 1 from lease)
)
select now() as db_now,
       (select lease.epoch from lease) as epoch,
       (select lease.expires_at from lease) as expires_at,
       current.holder as holder,
       current.epoch as holder_epoch,
       current.expires_at as holder_expires_at,
       (select coalesce(jsonb_agg(jsonb_build_object(
            'name', s.name, 'watermark', s.watermark, 'schedule', s.schedule, 'timezone', s.timezone,
            'catch_up', s.catch_up)), '[]'::jsonb)
        from state as s where s.watermark is not null) as tasks,
       (select coalesce(array_agg(moved.name), '{}'::text[]) from moved) as fired,
       (select coalesce(array_agg(inserted.id::text), '{}'::text[]) from inserted) as inserted,
       (select count(*) from wake) as woken
from (select 1 as one) as round
-- the lease as it stood before this statement: who leads, until when (for a standby)
left join {schema}.leaders as current on current.role = 'scheduler'
"""

# Step down: end the lease now (so the next round anywhere takes it) and wake the standbys.
RELEASE = """
with released as (
    update {schema}.leaders as l
    set expires_at = now(), renewed_at = now()
    where l.role = 'scheduler' and l.holder = %(holder)s::text and l.epoch = %(epoch)s::bigint
    returning l.epoch
), wake as (
    select pg_notify(%(channel)s::text, '') from released
)
select (select count(*) from released) as released, (select count(*) from wake) as woken
"""

# `workhorse tasks`: every registered task, with the database clock to judge next_at against.
LIST_TASKS = """
select t.name, t.schedule, t.timezone, t.catch_up, t.watermark, t.next_at, t.last_fired_at,
       t.last_job_id::text as last_job_id, t.fired, t.registered_at, now() as db_now
from {schema}.tasks as t
order by t.name
"""

# The scheduler lease as it stands (one row, holder null when none was ever taken), whether it is
# live on the database clock, and that clock.
LEADER = """
select l.holder, l.epoch, l.host, l.pid, l.acquired_at, l.renewed_at, l.expires_at,
       coalesce(l.expires_at > now(), false) as live, now() as db_now
from (select 1 as one) as probe
left join {schema}.leaders as l on l.role = 'scheduler'
"""

# -- the rescue of lapsed leases (``workhorse.leader.rescue``) -------------------------------------
# Running jobs whose worker stopped renewing their lease, recovered whatever claims them, whichever
# queue, name or cap they belong to.
#
# A claim re-takes a lapsed lease it may run (CLAIM's and FLOW_CLAIM's lapsed arms). Everything
# else waits for RESCUE, which does what those arms do for the jobs no claim may take: the attempt
# stays spent, the job goes back 'ready' (due at once, as a claim's re-take would run it), and on
# its final attempt it is buried 'dead' (or 'failed' without a dead-letter queue) with the
# LeaseLapsed error. The same counters move as in the claim: `lapsed` for a job handed back, `dead`
# or `failed` for one buried.

# One bounded batch, ONE statement; the caller runs it again while a batch comes back full.
# `lapsed` reads jobs_running_lease_idx from its oldest entry (an empty range when nothing lapsed:
# one index probe) and locks with SKIP LOCKED, so a claim re-taking the same row, a concurrent
# rescuer or a renewal in flight is never waited on: what one of them holds is theirs. The lock
# re-reads the row, so a renewal that landed since the snapshot drops it (its lease is live).
# Each write is fenced on the claim it revokes (`claims` as locked, still 'running'): a late
# settle or renewal of that claim finds the row no longer running and writes nothing. The buried
# rows are locked before their counters (the order every settle keeps); `counted` upserts one row
# per (queue, name) in that order. `wake` tells each rescued row's queue that a job is due (a
# readied one) or that a slot freed (either: a cap counted the lapsed run until now).
RESCUE = (
    """
with lapsed as materialized (
    select j.id, j.claims, j.attempt >= j.max_attempts as exhausted
    from {schema}.jobs as j
    where j.state = 'running' and j.lease_expires_at < now()
    order by j.lease_expires_at, j.id
    limit %(batch)s
    for update skip locked
), buried as (
    update {schema}.jobs as j
    """
    + BURY_LAPSED
    + """
    from lapsed as l
    where j.id = l.id and l.exhausted and j.claims = l.claims and j.state = 'running'
    """
    + CLAIM_RETURNING
    + """
), """
    + release_cte("buried", "buried.state", channel=True)
    + """, readied as (
    -- the attempt stays spent: the next claim runs attempt + 1, as a claim's re-take would
    update {schema}.jobs as j
    set state = 'ready', run_at = least(j.run_at, now()), worker_id = null, lease_expires_at = null,
        updated_at = now()
    from lapsed as l
    where j.id = l.id and not l.exhausted and j.claims = l.claims and j.state = 'running'
    returning j.id, j.queue, j.name
), counted as (
    insert into {schema}.counters as c (tier, bucket, queue, name, failed, dead, lapsed)
    select 'minute', date_trunc('minute', now()), e.queue, e.name,
           count(*) filter (where e.outcome = 'failed'),
           count(*) filter (where e.outcome = 'dead'),
           count(*) filter (where e.outcome = 'lapsed')
    from (
        select buried.queue, buried.name, buried.state as outcome from buried
        union all
        select readied.queue, readied.name, 'lapsed' from readied
    ) as e
    group by e.queue, e.name
    order by e.queue, e.name  -- the fixed lock order: no deadlock with a claim or a settle
    on conflict (tier, bucket, queue, name) do update
    set failed = c.failed + excluded.failed, dead = c.dead + excluded.dead, lapsed = c.lapsed + excluded.lapsed
), moved as (
    select buried.queue from buried
    union all
    select readied.queue from readied
), """
    + wake_cte()
    + """
select 'buried' as kind, id::text as id, name, queue, tenant, state, payload, attempt, max_attempts,
       last_error, (select count(*) from wake) as woken, (select cardinality(released.queues) from released) as released
from buried
union all
select 'readied', id::text, name, queue, null, 'ready', null, null, null, null, (select count(*) from wake), null
from readied
"""
)
