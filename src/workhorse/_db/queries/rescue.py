"""The rescue of lapsed leases (``workhorse.rescue``): running jobs whose worker stopped renewing
their lease, recovered whatever claims them, whichever queue, name or cap they belong to.

A claim re-takes a lapsed lease it may run (CLAIM's and FLOW_CLAIM's lapsed arms). Everything
else waits for RESCUE, which does what those arms do for the jobs no claim may take: the attempt
stays spent, the job goes back 'ready' (due at once, as a claim's re-take would run it), and on
its final attempt it is buried 'dead' (or 'failed' without a dead-letter queue) with the
LeaseLapsed error. The same counters move as in the claim: `lapsed` for a job handed back, `dead`
or `failed` for one buried.
"""

from workhorse._db.queries.jobs import CLAIM_RETURNING, LAPSED_ERROR, errors_appended, wake_cte

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
    set state = case when j.dead_letter then 'dead' else 'failed' end,
        last_error = """
    + LAPSED_ERROR
    + """,
        errors = """
    + errors_appended(LAPSED_ERROR)
    + """,
        worker_id = null, lease_expires_at = null, finished_at = now(), updated_at = now()
    from lapsed as l
    where j.id = l.id and l.exhausted and j.claims = l.claims and j.state = 'running'
    """
    + CLAIM_RETURNING
    + """
), readied as (
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
       last_error, (select count(*) from wake) as woken
from buried
union all
select 'readied', id::text, name, queue, null, 'ready', null, null, null, null, (select count(*) from wake)
from readied
"""
)
