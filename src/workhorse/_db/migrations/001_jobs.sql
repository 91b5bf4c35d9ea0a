-- 001: the jobs table and the indexes the claim, the lease sweep, the idempotency key and the
-- operator listing rely on. Placeholder {schema} is replaced by the validated schema name.

create table if not exists {schema}.jobs (
    id               uuid        primary key,
    name             text        not null,
    queue            text        not null,
    tenant           text,
    state            text        not null,
    priority         integer     not null default 0,
    payload          jsonb       not null,
    result           jsonb,
    last_error       jsonb,
    progress         jsonb,
    idempotency_key  text,
    attempt          integer     not null default 0,
    max_attempts     integer     not null,
    dead_letter      boolean     not null default true,
    claims           integer     not null default 0,
    worker_id        text,
    lease_expires_at timestamptz,
    run_at           timestamptz not null,
    created_at       timestamptz not null default now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz not null default now(),
    constraint jobs_state_known check (
        state in ('ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled')
    ),
    constraint jobs_attempts_sane check (max_attempts >= 1 and attempt >= 0 and claims >= 0)
);

-- The claim reads only rows that can run: a partial index keeps it an index scan at millions of
-- finished rows. Order matches the claim: priority (higher first), then run_at, then id.
create index if not exists jobs_due_idx
    on {schema}.jobs (queue, priority desc, run_at, id)
    where state in ('ready', 'delayed');

-- When is the next delayed job due? An idle worker sleeps until then instead of polling.
create index if not exists jobs_delayed_idx
    on {schema}.jobs (queue, run_at)
    where state = 'delayed';

-- Running rows whose lease lapsed are re-claimed (or buried) by the claim: a small partial index.
create index if not exists jobs_running_lease_idx
    on {schema}.jobs (lease_expires_at)
    where state = 'running';

-- The idempotency key holds while a job is live. A unique index (never an advisory lock) makes
-- a concurrent duplicate enqueue lose inside its own transaction.
create unique index if not exists jobs_live_key_idx
    on {schema}.jobs (name, coalesce(tenant, ''), idempotency_key)
    where idempotency_key is not null and state in ('ready', 'delayed', 'running', 'suspended');

-- Operator listing: keyset pagination, newest first.
create index if not exists jobs_created_idx on {schema}.jobs (created_at desc, id desc);
