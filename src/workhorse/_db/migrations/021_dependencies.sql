-- 021: job dependencies. Placeholder {schema} is replaced by the schema name.
--
-- A job enqueued with after=[...] waits in state 'pending' until the jobs it names are final.
-- deps_left counts the dependencies not yet final (moved by the statement that finalises each one);
-- deps_when is 'done' or 'finished' for a job with dependencies, null otherwise. has_dependents
-- marks a job some other job waits on, so the finalising statements of every other job skip the
-- release work entirely. Each change below is instant on a live table: columns with constant
-- defaults rewrite nothing, and the widened state domain is a superset, so old rows need no check.

do $$
begin
    if not exists (
        select 1 from pg_constraint
        where contypid = '{schema}.job_state'::regtype and conname = 'job_state_known_v2'
    ) then
        alter domain {schema}.job_state drop constraint if exists job_state_check;
        alter domain {schema}.job_state add constraint job_state_known_v2 check (
            value in ('pending', 'ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled')
        ) not valid;
    end if;
end
$$;

alter table {schema}.jobs
    add column if not exists deps_left integer not null default 0,
    add column if not exists deps_when text,
    add column if not exists has_dependents boolean not null default false;

-- One row per edge: child waits on parent, position keeping the order given at enqueue. No foreign
-- keys: retention deletes finished jobs in bulk, and an edge outliving a purged parent is harmless.
create table if not exists {schema}.job_deps (
    child_id  uuid    not null,
    position  integer not null,
    parent_id uuid    not null,
    primary key (child_id, position)
);

-- A finalising parent finds its dependents; retention asks whether a pending child still reads it.
create index if not exists job_deps_parent_idx on {schema}.job_deps (parent_id);
