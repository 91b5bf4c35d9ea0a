-- outbox 001: the staging table, installed in the database whose transactions stage jobs (the
-- source), which need not be the queue's. Placeholder {schema} is replaced by the schema name.
--
-- One row per staged job, written by Outbox.stage on the caller's own connection. Its id is the
-- job's id in the queue: the relay inserts with ON CONFLICT DO NOTHING, so moving a row twice
-- (a relay killed between the queue's commit and the mark here) inserts nothing twice.
create table if not exists {schema}.outbox (
    id uuid primary key,
    name text not null,
    queue text not null,
    tenant text,
    payload jsonb not null,
    idempotency_key text,
    priority int not null,
    max_attempts int not null,
    dead_letter boolean not null,
    run_at timestamptz,                        -- an explicit run_at= of the stage, else null
    delay float8 not null default 0,           -- seconds after staged_at (the delay= of the stage)
    flow_key text,
    traceparent text,
    staged_at timestamptz not null default now(),
    claims int not null default 0,             -- how many times a relay took the row
    relay_id text,                             -- the relay holding (or last holding) the row
    lease_expires_at timestamptz,              -- a relay holds the row until then
    published_at timestamptz,                  -- when the job was committed in the queue
    outcome text                               -- enqueued | present | duplicate (see the README)
);

-- The relay claims pending rows oldest-first: a partial index that only holds what is pending.
create index if not exists outbox_pending_idx on {schema}.outbox (id) where published_at is null;

-- Retention removes published rows oldest-first.
create index if not exists outbox_published_idx on {schema}.outbox (published_at) where published_at is not null;
