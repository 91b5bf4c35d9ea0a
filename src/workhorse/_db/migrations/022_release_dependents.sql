-- 022: release_dependents, the one call every statement that makes jobs final makes for those of
-- them some job waits on (has_dependents). Placeholder {schema} is replaced by the schema name.
--
-- Given the ids of jobs that just became final and their final states, it moves each waiting
-- ('pending') dependent: deps_left drops by its edges to them; a when='done' dependent of a job
-- that did not end 'done' is cancelled at once (last_error naming that dependency and its state);
-- one whose count reaches 0 becomes 'ready' (or 'delayed' when its run_at is ahead). A cancelled
-- dependent is final too, so its own dependents are released in turn (a worklist, level by level).
-- Dependents are locked in id order before they are written: two settles releasing the last two
-- dependencies of one job at once queue on its row, and exactly one of them makes it ready.
-- With a channel, one NOTIFY per queue that got a job to run (skipped when the notification queue
-- is half full, as every wake). Answers those queues, sorted, without duplicates.
-- Design: docs/guides/dependencies.md

-- An edge counts once: the first time its dependency is final (released), at enqueue when it
-- already is. A dependency requeued and finished again moves no count a second time.
alter table {schema}.job_deps add column if not exists released boolean not null default false;

create or replace function {schema}.release_dependents(
    parent_ids uuid[], parent_states text[], channel text default null
) returns text[]
language plpgsql volatile
as $release$
declare
    work_ids uuid[] := parent_ids;
    work_states text[] := parent_states;
    woken text[] := '{}';
    next_ids uuid[];
    next_queues text[];
begin
    while coalesce(cardinality(work_ids), 0) > 0 loop
        perform 1
        from {schema}.jobs as c
        where c.id = any(array(
                  select d.child_id from {schema}.job_deps as d where d.parent_id = any(work_ids)))
          and c.state = 'pending'
        order by c.id
        for update of c;

        with counted as (
            update {schema}.job_deps as d
            set released = true
            from unnest(work_ids, work_states) as p(id, state)
            where d.parent_id = p.id and not d.released
            returning d.child_id, d.position, p.id as parent_id, p.state as parent_state
        ), hits as (
            select e.child_id, count(*)::int as n,
                   (array_agg(e.parent_id order by e.position)
                        filter (where e.parent_state <> 'done'))[1] as broken_id,
                   (array_agg(e.parent_state order by e.position)
                        filter (where e.parent_state <> 'done'))[1] as broken_state
            from counted as e
            group by e.child_id
        ), judged as (
            select h.child_id, h.n, h.broken_id, h.broken_state,
                   (select b.name from {schema}.jobs as b where b.id = h.broken_id) as broken_name
            from hits as h
        ), moved as (
            update {schema}.jobs as j
            set deps_left = greatest(j.deps_left - h.n, 0),
                state = case
                    when h.broken_id is not null and j.deps_when = 'done' then 'cancelled'
                    when j.deps_left - h.n > 0 then 'pending'
                    when j.run_at > now() then 'delayed'
                    else 'ready' end,
                last_error = case
                    when h.broken_id is not null and j.deps_when = 'done' then jsonb_build_object(
                        'type', 'DependencyFailed', 'code', 'DEPENDENCY_FAILED',
                        'message', 'dependency ' || h.broken_id::text || ' (' || coalesce(h.broken_name, '?')
                            || ') ended ' || h.broken_state || ', so this job (after=..., when=''done'') '
                            || 'was cancelled without running',
                        'dependency', h.broken_id::text, 'dependency_state', h.broken_state,
                        'traceback', null)
                    else j.last_error end,
                finished_at = case when h.broken_id is not null and j.deps_when = 'done' then now()
                                   else j.finished_at end,
                updated_at = now()
            from judged as h
            where j.id = h.child_id and j.state = 'pending'
            returning j.id, j.queue, j.state, j.has_dependents
        )
        select coalesce(array_agg(m.id) filter (where m.state = 'cancelled' and m.has_dependents), '{}'),
               coalesce(array_agg(m.queue) filter (where m.state in ('ready', 'delayed')), '{}')
        into next_ids, next_queues
        from moved as m;

        woken := woken || next_queues;
        work_ids := next_ids;
        work_states := array_fill('cancelled'::text, array[cardinality(next_ids)]);
    end loop;

    woken := array(select distinct q from unnest(woken) as q order by q);
    if channel is not null and cardinality(woken) > 0 and pg_notification_queue_usage() < 0.5 then
        perform pg_notify(channel, q) from unnest(woken) as q;
    end if;
    return woken;
end
$release$;
