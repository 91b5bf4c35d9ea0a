"""The retention purge (``workhorse.retention``): one target per statement, one small batch per
statement, each batch its own transaction.

Design: docs/guides/retention.md
"""


def kept() -> str:
    """The condition a finished row ``j`` meets unless some unfinished job still waits on it or will
    read its result (ctx.dependencies): only a row marked has_dependents pays the look at its edges."""
    return """ and not (j.has_dependents and exists (
        select 1 from {schema}.job_deps as d join {schema}.jobs as c on c.id = d.child_id
        where d.parent_id = j.id and c.state not in ('done', 'failed', 'dead', 'cancelled')))"""


# A batch of finished jobs of one state, older than `age` seconds; the edges of the purged rows
# to their own dependencies go with them.
PURGE_JOBS = (
    """
with doomed as (
    select j.id
    from {schema}.jobs as j
    where j.state in ('done', 'failed', 'dead', 'cancelled') and j.state = %(state)s::text
      and j.finished_at < now() - %(age)s::float8 * interval '1 second'"""
    + kept()
    + """
    order by j.finished_at
    limit %(batch)s
    for update skip locked
), steps as (
    select count(*) as n from {schema}.steps as s where s.job_id = any(array(select doomed.id from doomed))
), gone as (
    delete from {schema}.jobs as j
    using doomed
    where j.id = doomed.id
    returning j.id
), unlinked as (
    delete from {schema}.job_deps as d
    using gone
    where d.child_id = gone.id
)
select (select count(*) from gone) as removed, (select steps.n from steps) as steps
"""
)

COUNT_JOBS = (
    """
select count(*) as removed,
       (select count(*) from {schema}.steps as s
        join {schema}.jobs as j on j.id = s.job_id
        where j.state in ('done', 'failed', 'dead', 'cancelled') and j.state = %(state)s::text
          and j.finished_at < now() - %(age)s::float8 * interval '1 second'"""
    + kept()
    + """) as steps
from {schema}.jobs as j
where j.state in ('done', 'failed', 'dead', 'cancelled') and j.state = %(state)s::text
  and j.finished_at < now() - %(age)s::float8 * interval '1 second'"""
    + kept()
    + """
"""
)

# Events past their expiry by `age` seconds (0: as soon as they expire).
PURGE_EVENTS = """
with doomed as (
    select e.id from {schema}.events as e
    where e.expires_at <= now() - %(age)s::float8 * interval '1 second'
    order by e.expires_at
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.events as e using doomed where e.id = doomed.id returning e.id
)
select count(*) as removed, 0 as steps from gone
"""

COUNT_EVENTS = """
select count(*) as removed, 0 as steps from {schema}.events as e
where e.expires_at <= now() - %(age)s::float8 * interval '1 second'
"""

# Registry rows of workers gone (expired) for longer than `age` seconds. A live worker's row is
# never one: its heartbeat keeps expires_at ahead of now().
PURGE_WORKERS = """
with doomed as (
    select w.id from {schema}.workers as w
    where w.expires_at < now() - %(age)s::float8 * interval '1 second'
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.workers as w using doomed where w.id = doomed.id returning w.id
)
select count(*) as removed, 0 as steps from gone
"""

COUNT_WORKERS = """
select count(*) as removed, 0 as steps from {schema}.workers as w
where w.expires_at < now() - %(age)s::float8 * interval '1 second'
"""

# Rate stamps older than `age` seconds (a claim under a rate prunes its own window; these are the
# stamps of a rate no longer declared, or of tenants that stopped starting).
PURGE_FLOW_STARTS = """
with doomed as (
    select s.ctid from {schema}.flow_starts as s
    where s.started_at < now() - %(age)s::float8 * interval '1 second'
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.flow_starts as s using doomed where s.ctid = doomed.ctid returning 1
)
select count(*) as removed, 0 as steps from gone
"""

COUNT_FLOW_STARTS = """
select count(*) as removed, 0 as steps from {schema}.flow_starts as s
where s.started_at < now() - %(age)s::float8 * interval '1 second'
"""

# Day counters older than `age` seconds (minutes and hours are folded into days, never deleted).
PURGE_COUNTERS = """
with doomed as (
    select c.tier, c.bucket, c.queue, c.name from {schema}.counters as c
    where c.tier = 'day' and c.bucket < now() - %(age)s::float8 * interval '1 second'
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.counters as c using doomed
    where (c.tier, c.bucket, c.queue, c.name) = (doomed.tier, doomed.bucket, doomed.queue, doomed.name)
    returning 1
)
select count(*) as removed, 0 as steps from gone
"""

COUNT_COUNTERS = """
select count(*) as removed, 0 as steps from {schema}.counters as c
where c.tier = 'day' and c.bucket < now() - %(age)s::float8 * interval '1 second'
"""

# The webhooks delivery ledger's rows older than `age` seconds by their attempt time (created_at),
# oldest first: the batch walks webhook_deliveries_created_idx (migration 017) and deletes its
# rows by primary key (`= any(array(...))`: a join to the CTE would hash the whole ledger).
PURGE_WEBHOOK_DELIVERIES = """
with doomed as (
    select d.id from {schema}.webhook_deliveries as d
    where d.created_at < now() - %(age)s::float8 * interval '1 second'
    order by d.created_at
    limit %(batch)s
    for update skip locked
), gone as (
    delete from {schema}.webhook_deliveries as d
    where d.id = any(array(select doomed.id from doomed))
    returning d.id
)
select count(*) as removed, 0 as steps from gone
"""

COUNT_WEBHOOK_DELIVERIES = """
select count(*) as removed, 0 as steps from {schema}.webhook_deliveries as d
where d.created_at < now() - %(age)s::float8 * interval '1 second'
"""

# target -> (purge batch, dry-run count); the job states share PURGE_JOBS with their state.
JOB_TARGETS = ("done", "cancelled", "failed", "dead")
STATEMENTS = {
    "events": (PURGE_EVENTS, COUNT_EVENTS),
    "workers": (PURGE_WORKERS, COUNT_WORKERS),
    "flow_starts": (PURGE_FLOW_STARTS, COUNT_FLOW_STARTS),
    "counters": (PURGE_COUNTERS, COUNT_COUNTERS),
    "webhook_deliveries": (PURGE_WEBHOOK_DELIVERIES, COUNT_WEBHOOK_DELIVERIES),
}
