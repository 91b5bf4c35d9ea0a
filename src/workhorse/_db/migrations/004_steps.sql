-- 004: durable steps and stored events. Placeholder {schema} is replaced by the schema name.
--
-- steps: one row per named step of a job, written fenced on the job's claim (a write only lands
-- while the writer still holds the running row). `seq` is the step's position in the run, the
-- order `requeue --from-step` cuts at. A sleep or a wait keeps its row 'sleeping'/'waiting' while
-- the job is suspended: `started_at` is when the wait began (the database clock) and `wake_at`
-- the end of the sleep or the wait's deadline. Deleting a job deletes its steps; the primary key
-- (job_id first) serves that cascade and the one read a run hydrates with.

create table if not exists {schema}.steps (
    job_id      uuid        not null references {schema}.jobs (id) on delete cascade,
    name        text        not null,
    seq         integer     not null,
    state       text        not null,
    result      jsonb,
    error       jsonb,
    attempt     integer     not null,
    started_at  timestamptz,
    finished_at timestamptz,
    wake_at     timestamptz,
    event       text,
    event_key   text,
    primary key (job_id, name),
    constraint steps_state_known check (state in ('done', 'failed', 'sleeping', 'waiting'))
);

-- A publish finds the runs waiting on its (name, key): only rows still waiting are indexed.
-- coalesce(): a wait without a key matches events without one (keys are never empty strings).
create index if not exists steps_waiting_idx
    on {schema}.steps (event, coalesce(event_key, ''))
    where state = 'waiting';

-- events: stored, never broadcast, so a run that was suspended, queued or between workers when
-- an event was published still finds it when it resumes. Times are the database's clock.
create table if not exists {schema}.events (
    id           bigint      generated always as identity primary key,
    name         text        not null,
    key          text,
    payload      jsonb       not null,
    published_at timestamptz not null default statement_timestamp(),
    expires_at   timestamptz not null
);

-- A wait asks for the earliest event of (name, key) published at or after it began.
create index if not exists events_match_idx
    on {schema}.events (name, coalesce(key, ''), published_at);

-- The purge deletes expired rows in small batches, oldest expiry first.
create index if not exists events_expires_idx on {schema}.events (expires_at);

-- Suspended jobs come due like delayed ones: widen the claim's partial indexes to cover them.
-- Replaced here rather than edited in 001, so a database migrated before this file gets them too.
drop index if exists {schema}.jobs_due_idx;
create index jobs_due_idx
    on {schema}.jobs (queue, priority desc, run_at, id)
    where state in ('ready', 'delayed', 'suspended');

-- When does the next delayed or suspended job come due? An idle worker sleeps until then.
drop index if exists {schema}.jobs_delayed_idx;
create index if not exists jobs_later_idx
    on {schema}.jobs (queue, run_at)
    where state in ('delayed', 'suspended');
