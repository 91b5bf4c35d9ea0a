"""The claim that enforces flow control (``workhorse.limits``): fleet-wide caps by job name, by key,
by tenant, by queue and in total, and a sliding rate window per tenant.

Design: docs/guides/flow-control.md
"""

from workhorse._db.queries.jobs import (
    BURY_LAPSED,
    CLAIM_RETURNING,
    CLAIM_TAKES,
    claim_answer,
    errors_appended,
    release_cte,
)

# What a run refused by its key (when_busy='fail') is settled with.
KEY_BUSY_ERROR = """jsonb_build_object(
            'type', 'JobKeyBusy', 'code', 'JOB_KEY_BUSY',
            'message', 'concurrency key ' || coalesce(c.flow_key, '') || ' of job ' || j.name
                || ' already runs at its cap; the job declares when_busy=''fail'', so this run was refused '
                || 'without running',
            'traceback', null)"""

# Parameters: worker_id, queues/slots (as CLAIM), names, visibility, and the rules:
#   cap_names/cap_limits          per job name
#   key_names/key_limits/key_fail per (job name, flow_key); key_fail refuses instead of waiting
#   tenant_cap                    per tenant (null: none)
#   queue_cap_names/queue_cap_limits, queue_cap_default   per queue
#   total_cap                     every counted run
#   rate_n, rate_per              starts per tenant in any window of rate_per seconds
FLOW_CLAIM = (
    """
with recursive gate as materialized (
    select 1::bigint as taken from pg_advisory_xact_lock(hashtext('{schema}.flow'), 0)  -- the flow lock
), wanted as (
    select w.queue, w.slots
    from unnest(%(queues)s::text[], %(slots)s::int[]) as w(queue, slots)
    where not exists (select 1 from {schema}.queue_pauses as p where p.queue = w.queue)
), name_caps as materialized (
    select c.name, c.cap from unnest(%(cap_names)s::text[], %(cap_limits)s::bigint[]) as c(name, cap)
), key_caps as materialized (
    select c.name, c.cap, c.fail
    from unnest(%(key_names)s::text[], %(key_limits)s::bigint[], %(key_fail)s::bool[]) as c(name, cap, fail)
), queue_caps as materialized (
    select c.queue, c.cap from unnest(%(queue_cap_names)s::text[], %(queue_cap_limits)s::bigint[]) as c(queue, cap)
), running as materialized (
    -- every running row some cap counts, read once, fresh: after the lock (migration 012)
    select j.id, j.name, j.queue, j.tenant, j.flow_key, j.lease_expires_at, j.lease_expires_at < now() as lapsed
    from gate cross join lateral {schema}.flow_running(gate.taken) as j
    where %(total_cap)s::bigint is not null
       or %(queue_cap_default)s::bigint is not null
       or (j.tenant is not null and %(tenant_cap)s::bigint is not null)
       or j.queue = any(%(queue_cap_names)s::text[])
       or j.name = any(%(cap_names)s::text[])
       or j.name = any(%(key_names)s::text[])
), lapsed_ours as (
    -- lapsed leases this claim may re-take that no cap counts (so `running` does not read them):
    -- per wanted queue, its names, oldest lapse first (jobs_running_lease_idx), up to its slots
    select l.id
    from wanted cross join lateral (
        select j.id
        from {schema}.jobs as j
        where j.state = 'running' and j.lease_expires_at < now()
          and j.queue = wanted.queue and j.name = any(%(names)s::text[])
        order by j.lease_expires_at, j.id
        limit wanted.slots
    ) as l
), freed as materialized (
    -- lapsed leases, locked: each is re-claimed, buried or revoked below, and frees its slots.
    -- The lock re-reads each row: one an earlier claim re-took since this statement's snapshot
    -- has a live lease again and drops out.
    select j.id, j.name, j.queue, j.tenant, j.flow_key, j.priority, j.run_at, j.lease_expires_at,
           j.attempt >= j.max_attempts as exhausted,
           j.name = any(%(names)s::text[]) and exists (select 1 from wanted where wanted.queue = j.queue) as ours
    from {schema}.jobs as j
    where j.id = any(array(select r.id from running as r where r.lapsed union select l.id from lapsed_ours as l))
      and j.state = 'running' and j.lease_expires_at < now()
    for update skip locked
), held as materialized (
    select r.id, r.name, r.queue, r.tenant, r.flow_key, r.lease_expires_at
    from running as r
    where not exists (select 1 from freed where freed.id = r.id)
), held_name as (
    select held.name, count(*) as n from held group by held.name
), held_key as materialized (
    select held.name, held.flow_key, count(*) as n from held
    where held.flow_key is not null and held.name = any(%(key_names)s::text[])
    group by held.name, held.flow_key
), held_tenant as materialized (
    select held.tenant, count(*) as n from held where held.tenant is not null group by held.tenant
), held_queue as (
    select held.queue, count(*) as n from held group by held.queue
), pruned as (
    delete from {schema}.flow_starts as s
    where %(rate_n)s::bigint is not null and s.started_at <= now() - %(rate_per)s::float8 * interval '1 second'
), starts as materialized (
    select s.tenant, s.n, s.oldest
    from gate cross join lateral {schema}.flow_recent_starts(gate.taken, %(rate_per)s::float8) as s
    where %(rate_n)s::bigint is not null
), full_names as materialized (
    select nc.name from name_caps as nc left join held_name as h on h.name = nc.name
    where coalesce(h.n, 0) >= nc.cap
    union
    select kc.name from key_caps as kc where kc.cap = 0  -- a key cap of 0 stops every key
), full_keys as materialized (
    select h.name, h.flow_key from held_key as h join key_caps as kc on kc.name = h.name
    where h.n >= kc.cap and not kc.fail  -- a refusing key's jobs are taken, to be refused
), full_tenants as materialized (
    select h.tenant from held_tenant as h where h.n >= %(tenant_cap)s::bigint
    union
    select s.tenant from starts as s where s.n >= %(rate_n)s::bigint
), room as (
    select wanted.queue,
           least(wanted.slots,
                 case when coalesce(qc.cap, %(queue_cap_default)s::bigint) is null then wanted.slots
                      else greatest(coalesce(qc.cap, %(queue_cap_default)s::bigint) - coalesce(hq.n, 0), 0) end,
                 case when %(total_cap)s::bigint is null then wanted.slots
                      else greatest(%(total_cap)s::bigint - (select count(*) from held), 0) end) as slots
    from wanted
    left join queue_caps as qc on qc.queue = wanted.queue
    left join held_queue as hq on hq.queue = wanted.queue
), due as (
    select d.id, d.name, room.queue, d.tenant, d.flow_key, d.priority, d.run_at
    from room cross join lateral (
        select j.id, j.name, j.tenant, j.flow_key, j.priority, j.run_at
        from {schema}.jobs as j
        where j.state in ('ready', 'delayed', 'suspended') and j.run_at <= now()
          and j.queue = room.queue and j.name = any(%(names)s::text[])
          -- the blocked scopes as arrays computed once, compared with expressions the planner
          -- has no statistics for (so it does not guess that nearly every row is blocked, and
          -- keeps the ordered jobs_due_idx scan that stops at the limit), never an anti-join
          and (j.name || '') <> all(array(select name from full_names))
          and (j.tenant is null
               or ((j.tenant || '') <> all(array(select tenant from full_tenants))
                   and %(tenant_cap)s::bigint is distinct from 0 and %(rate_n)s::bigint is distinct from 0))
          and (j.flow_key is null
               or j.name || chr(31) || j.flow_key
                  <> all(array(select fk.name || chr(31) || fk.flow_key from full_keys as fk)))
        order by j.priority desc, j.run_at, j.id
        limit room.slots
        for update skip locked
    ) as d
    where room.slots > 0
), candidates as (
    -- each candidate with what its caps allow: the cap and what is held of it (null: no cap)
    select row_number() over (order by u.arm, u.priority desc, u.run_at, u.id) as n,
           u.id, u.queue, u.flow_key, wanted.slots,
           coalesce(qc.cap, %(queue_cap_default)s::bigint) as queue_cap, coalesce(hq.n, 0) as queue_held,
           nc.cap as name_cap, coalesce(hn.n, 0) as name_held,
           case when u.flow_key is not null then kc.cap end as key_cap, coalesce(hk.n, 0) as key_held,
           coalesce(kc.fail, false) as key_fail,
           case when u.tenant is not null then %(tenant_cap)s::bigint end as tenant_cap,
           coalesce(ht.n, 0) as tenant_held,
           case when u.tenant is not null then %(rate_n)s::bigint end as rate_cap, coalesce(st.n, 0) as rate_held,
           'q:' || u.queue as kq, 'n:' || u.name as kn,
           coalesce('k:' || u.name || chr(31) || u.flow_key, '-k') as kk, coalesce('t:' || u.tenant, '-t') as kt
    from (
        select f.id, f.name, f.queue, f.tenant, f.flow_key, 0 as arm, f.priority, f.lease_expires_at as run_at
        from freed as f where f.ours and not f.exhausted
        union all
        select due.id, due.name, due.queue, due.tenant, due.flow_key, 1, due.priority, due.run_at from due
    ) as u
    join wanted on wanted.queue = u.queue
    left join queue_caps as qc on qc.queue = u.queue
    left join held_queue as hq on hq.queue = u.queue
    left join name_caps as nc on nc.name = u.name
    left join held_name as hn on hn.name = u.name
    left join key_caps as kc on kc.name = u.name
    left join held_key as hk on hk.name = u.name and hk.flow_key = u.flow_key
    left join held_tenant as ht on ht.tenant = u.tenant
    left join starts as st on st.tenant = u.tenant
), walk as (
    -- greedy, in claim order: a candidate is taken when every cap it counts toward has room for
    -- it after what is held and what this walk already took (`took`, counts by cap)
    select 0::bigint as n, null::uuid as id, null::text as flow_key, null::text as verdict, '{}'::jsonb as took
    union all
    select c.n, c.id, c.flow_key, v.verdict,
           case when v.verdict = 'taken'
                then w.took || jsonb_build_object(
                    c.kq, coalesce((w.took ->> c.kq)::int, 0) + 1, c.kn, coalesce((w.took ->> c.kn)::int, 0) + 1,
                    c.kk, coalesce((w.took ->> c.kk)::int, 0) + 1, c.kt, coalesce((w.took ->> c.kt)::int, 0) + 1,
                    'all', coalesce((w.took ->> 'all')::int, 0) + 1)
                else w.took end
    from walk as w
    join candidates as c on c.n = w.n + 1
    cross join lateral (
        select case
            when c.key_fail and c.key_cap > 0 and c.key_held >= c.key_cap then 'refused'  -- 0: a hard stop
            when coalesce((w.took ->> c.kq)::int, 0) < c.slots
             and (c.queue_cap is null or c.queue_held + coalesce((w.took ->> c.kq)::int, 0) < c.queue_cap)
             and (c.name_cap is null or c.name_held + coalesce((w.took ->> c.kn)::int, 0) < c.name_cap)
             and (c.key_cap is null or c.key_held + coalesce((w.took ->> c.kk)::int, 0) < c.key_cap)
             and (c.tenant_cap is null or c.tenant_held + coalesce((w.took ->> c.kt)::int, 0) < c.tenant_cap)
             and (c.rate_cap is null or c.rate_held + coalesce((w.took ->> c.kt)::int, 0) < c.rate_cap)
             and (%(total_cap)s::bigint is null
                  or (select count(*) from held) + coalesce((w.took ->> 'all')::int, 0) < %(total_cap)s::bigint)
            then 'taken'
            else 'held'
        end as verdict
    ) as v
), judged as materialized (
    select walk.id, walk.flow_key, walk.verdict from walk where walk.n > 0
), buried as (
    update {schema}.jobs as j
    """
    + BURY_LAPSED
    + """
    where j.id = any(array(select f.id from freed as f where f.ours and f.exhausted))
    """
    + CLAIM_RETURNING
    + """
), claimed as (
    update {schema}.jobs as j
    """
    + CLAIM_TAKES
    + """
    where j.id = any(array(select judged.id from judged where judged.verdict = 'taken'))
    """
    + CLAIM_RETURNING
    + """
), refused as (
    update {schema}.jobs as j
    set state = 'failed', attempt = j.attempt + 1, claims = j.claims + 1,
        last_error = """
    + KEY_BUSY_ERROR
    + """,
        errors = """
    + errors_appended(KEY_BUSY_ERROR)
    + """,
        worker_id = null, lease_expires_at = null, started_at = now(), finished_at = now(), updated_at = now()
    from judged as c
    where j.id = c.id and c.verdict = 'refused'
    """
    + CLAIM_RETURNING
    + """
), finalised as (
    select buried.id, buried.has_dependents, buried.state from buried
    union all
    select refused.id, refused.has_dependents, refused.state from refused
), """
    + release_cte("finalised", "finalised.state", channel=True)
    + """, revoked as (
    -- a lapsed lease this claim freed and did not take: its holder's next renewal misses
    update {schema}.jobs as j
    set claims = j.claims + 1, worker_id = null
    where j.id = any(array(
        select f.id from freed as f
        where not (f.ours and f.exhausted)
          and not exists (select 1 from judged where judged.id = f.id and judged.verdict <> 'held')))
    returning j.id
), stamped as (
    insert into {schema}.flow_starts (tenant, started_at, job_id)
    select claimed.tenant, clock_timestamp(), claimed.id from claimed  -- after the lock, as the window reads
    where %(rate_n)s::bigint is not null and claimed.tenant is not null
), counted as (
    insert into {schema}.counters as c (tier, bucket, queue, name, failed, dead, lapsed)
    select 'minute', date_trunc('minute', now()), e.queue, e.name,
           count(*) filter (where e.outcome = 'failed'),
           count(*) filter (where e.outcome = 'dead'),
           count(*) filter (where e.outcome = 'lapsed')
    from (
        select buried.queue, buried.name, buried.state as outcome from buried
        union all
        select refused.queue, refused.name, 'failed' from refused
        union all
        select claimed.queue, claimed.name, 'lapsed' from claimed
        join freed on freed.id = claimed.id
    ) as e
    group by e.queue, e.name
    order by e.queue, e.name  -- the fixed lock order: no deadlock between two claimers or settlers
    on conflict (tier, bucket, queue, name) do update
    set failed = c.failed + excluded.failed, dead = c.dead + excluded.dead, lapsed = c.lapsed + excluded.lapsed
), next_due as (
    select extract(epoch from min(n.at) - now())::float8 as seconds
    from (
        select min(j.run_at) as at
        from wanted cross join lateral (
            select j.run_at
            from {schema}.jobs as j
            where j.state in ('delayed', 'suspended') and j.run_at > now() and j.queue = wanted.queue
              and j.name = any(%(names)s::text[])
            order by j.run_at
            limit 1
        ) as j
        union all
        select min(held.lease_expires_at) from held where held.lease_expires_at > now()  -- a slot may free
        union all
        select min(l.at)  -- a lease no cap counts could lapse: this claim would re-take it
        from wanted cross join lateral (
            select j.lease_expires_at as at
            from {schema}.jobs as j
            where j.state = 'running' and j.lease_expires_at > now() and j.queue = wanted.queue
              and j.name = any(%(names)s::text[])
            order by j.lease_expires_at
            limit 1
        ) as l
        union all
        select min(s.oldest) + %(rate_per)s::float8 * interval '1 second'
        from starts as s where s.n >= %(rate_n)s::bigint
    ) as n
)
"""
    + claim_answer("buried", "refused", next_due=True, held=True, released=True)
)

# What holds the caps now, for the operator surface (``flow_usage``): running rows with live
# leases by scope, and the rate starts inside the window. No lock: a read, as of its snapshot.
FLOW_USAGE = """
with held as materialized (
    select j.name, j.queue, j.tenant, j.flow_key
    from {schema}.jobs as j
    where j.state = 'running' and j.lease_expires_at >= now()
)
select 'name' as scope, held.name as value, count(*) as n from held group by held.name
union all
select 'key', held.name || chr(31) || held.flow_key, count(*) from held
where held.flow_key is not null group by held.name, held.flow_key
union all
select 'tenant', held.tenant, count(*) from held where held.tenant is not null group by held.tenant
union all
select 'queue', held.queue, count(*) from held group by held.queue
union all
select 'total', '', count(*) from held
union all
select 'start', s.tenant, count(*) from {schema}.flow_starts as s
where %(rate_per)s::float8 is not null and s.started_at > now() - %(rate_per)s::float8 * interval '1 second'
group by s.tenant
"""

# Per queue, the due ready jobs of the capped names a full cap holds back (the scopes FLOW_USAGE
# showed full, as FlowRules.full and FlowRules.holds read them).
FLOW_HELD_BACK = """
select j.queue, count(*) as n
from {schema}.jobs as j
where j.state in ('ready', 'delayed', 'suspended') and j.run_at <= now()
  and j.name = any(%(names)s::text[])
  and (%(total_full)s::bool
       or j.name = any(%(full_names)s::text[])
       or j.queue = any(%(full_queues)s::text[])
       or (j.tenant is not null and (%(every_tenant)s::bool or j.tenant = any(%(full_tenants)s::text[])))
       or (j.flow_key is not null and j.name || chr(31) || j.flow_key = any(%(full_keys)s::text[])))
group by j.queue
"""
