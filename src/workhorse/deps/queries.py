"""Statements over job dependencies (``job_deps``): the enqueue with ``after=``, the edges ``show``
reads. The release is ``release_dependents`` (migration 022), called by every finalising statement.

Design: docs/guides/dependencies.md
"""

from workhorse._db.queries.jobs import timed_rows

# A batch with dependencies, in ONE statement. Each dependency named is marked has_dependents by an
# UPDATE, which locks it (in id order, as the index scan reads the array) and reads its state as
# committed: a settle finalising it now either committed first (its state is final here, counted
# at once) or waits for this transaction and then finds the edges below (and releases them). A
# name no row answers is `unknown`, and then nothing is inserted (the caller raises
# DEPENDENCY_UNKNOWN). A job waits 'pending' on the dependencies not yet final (deps_left); with
# when='done', a dependency already failed, dead or cancelled cancels it at once, its last_error
# naming the first such one. Jobs with no edge in the batch are inserted as INSERT_MANY would
# (keyless: key= and after= are refused together). Wakes as INSERT_MANY, for the rows due now.
INSERT_AFTER = (
    "\n"
    + timed_rows()
    + """, whens as (
    select w.id, w.deps_when from unnest(%(ids)s::uuid[], %(whens)s::text[]) as w(id, deps_when)
), edges as (
    select e.child, e.position, e.parent
    from unnest(%(edge_children)s::uuid[], %(edge_positions)s::int[], %(edge_parents)s::uuid[])
        as e(child, position, parent)
), parents as (
    update {schema}.jobs as p
    set has_dependents = true
    where p.id = any(array(select distinct edges.parent from edges))
    returning p.id, p.state, p.name
), unknown as (
    select distinct edges.parent as id
    from edges
    where not exists (select 1 from parents where parents.id = edges.parent)
), judged as (
    select e.child,
           count(*) filter (where p.state not in ('done', 'failed', 'dead', 'cancelled')) as open,
           (array_agg(p.id order by e.position)
                filter (where p.state in ('failed', 'dead', 'cancelled')))[1] as broken_id,
           (array_agg(p.state order by e.position)
                filter (where p.state in ('failed', 'dead', 'cancelled')))[1] as broken_state,
           (array_agg(p.name order by e.position)
                filter (where p.state in ('failed', 'dead', 'cancelled')))[1] as broken_name
    from edges as e
    join parents as p on p.id = e.parent
    group by e.child
), shaped as (
    select t.id, t.name, t.queue, t.tenant, t.payload, t.priority, t.max_attempts, t.dead_letter, t.due,
           t.flow_key, t.traceparent, w.deps_when, g.open, g.broken_id, g.broken_state, g.broken_name,
           g.child is not null and w.deps_when = 'done' and g.broken_id is not null as cancelled
    from timed as t
    join whens as w on w.id = t.id
    left join judged as g on g.child = t.id
), inserted as (
    insert into {schema}.jobs (
        id, name, queue, tenant, state, priority, payload, max_attempts, dead_letter, run_at, flow_key,
        traceparent, deps_left, deps_when, last_error, finished_at
    )
    select r.id, r.name, r.queue, r.tenant,
           case when r.cancelled then 'cancelled'
                when coalesce(r.open, 0) > 0 then 'pending'
                when r.due > now() then 'delayed'
                else 'ready' end,
           r.priority, r.payload::jsonb, r.max_attempts, r.dead_letter, r.due, r.flow_key, r.traceparent,
           case when r.cancelled then 0 else coalesce(r.open, 0) end,
           case when r.open is null then null else r.deps_when end,
           case when r.cancelled then jsonb_build_object(
               'type', 'DependencyFailed', 'code', 'DEPENDENCY_FAILED',
               'message', 'dependency ' || r.broken_id::text || ' (' || r.broken_name || ') ended '
                   || r.broken_state || ', so this job (after=..., when=''done'') was cancelled without running',
               'dependency', r.broken_id::text, 'dependency_state', r.broken_state, 'traceback', null)
           end,
           case when r.cancelled then now() end
    from shaped as r
    where not exists (select 1 from unknown)
    returning id, queue, state
), linked as (
    insert into {schema}.job_deps (child_id, position, parent_id, released)
    select edges.child, edges.position, edges.parent, p.state in ('done', 'failed', 'dead', 'cancelled')
    from edges
    join parents as p on p.id = edges.parent
    where not exists (select 1 from unknown)
    returning child_id
), wake as (
    select pg_notify(%(channel)s, case when q.later then 'sweep:' || q.queue else q.queue end)
    from (select distinct queue, state = 'delayed' as later from inserted where state in ('ready', 'delayed')) as q
    where pg_notification_queue_usage() < 0.5
)
select 'job' as kind, inserted.id::text as id, inserted.state, (select count(*) from wake) as woken,
       (select count(*) from linked) as linked
from inserted
union all
select 'unknown', unknown.id::text, null, 0, 0
from unknown
"""
)

# The edges of one job, both ways, for ``show``: its dependencies in the order given, then the
# jobs waiting on it (by id), each with its reported state.
EDGES_OF = """
select 'dependency' as side, d.position, d.parent_id::text as id, p.name, p.state
from {schema}.job_deps as d
left join {schema}.jobs as p on p.id = d.parent_id
where d.child_id = %(id)s::uuid
union all
select 'dependent', null, d.child_id::text, c.name, c.state
from {schema}.job_deps as d
left join {schema}.jobs as c on c.id = d.child_id
where d.parent_id = %(id)s::uuid
order by 1, 2, 3
"""
