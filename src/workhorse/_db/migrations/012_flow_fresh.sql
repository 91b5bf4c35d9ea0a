-- 012: what a flow claim counts, read fresh. Placeholder {schema} is replaced by the schema name.
--
-- FLOW_CLAIM takes its advisory lock in its first CTE and must then count what every earlier
-- claim committed, while its own snapshot was taken before it waited for that lock. A VOLATILE
-- function's query takes a snapshot of its own when it runs (READ COMMITTED), so these two,
-- called with the lock's row as their argument (after the lock, by construction), see every
-- claim that committed before the lock was granted. One statement, in autocommit: the server
-- ends the transaction (and so the lock) when the statement ends, whatever the client does.

-- Every running row (jobs_running_lease_idx), for the caps to count.
create or replace function {schema}.flow_running(gate bigint)
returns table (id uuid, name text, queue text, tenant text, flow_key text, lease_expires_at timestamptz)
language sql volatile
as $$
    select j.id, j.name, j.queue, j.tenant, j.flow_key, j.lease_expires_at
    from {schema}.jobs as j
    where j.state = 'running' and gate is not null
$$;

-- Per tenant, the starts stamped within the last `per` seconds of the clock, and the oldest.
create or replace function {schema}.flow_recent_starts(gate bigint, per float8)
returns table (tenant text, n bigint, oldest timestamptz)
language sql volatile
as $$
    select s.tenant, count(*), min(s.started_at)
    from {schema}.flow_starts as s
    where gate is not null and per is not null and s.started_at > clock_timestamp() - per * interval '1 second'
    group by s.tenant
$$;
