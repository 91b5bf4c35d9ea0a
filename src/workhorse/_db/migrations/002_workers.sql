-- 002: the worker registry. One row per worker process (its incarnation id), renewed with the
-- lease heartbeat and live until expires_at. Job ownership never reads this table: a lapsed
-- lease on the job row alone decides a re-claim, so pruning a row can never strand a job.

create table if not exists {schema}.workers (
    id           text        primary key,
    host         text        not null,
    pid          integer     not null,
    queues       text[]      not null,
    concurrency  jsonb       not null,
    started_at   timestamptz not null default now(),
    last_seen_at timestamptz not null default now(),
    expires_at   timestamptz not null
);

create index if not exists workers_expires_idx on {schema}.workers (expires_at);
