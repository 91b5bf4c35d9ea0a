-- 013: the backfill ledger (workhorse.backfill). Placeholder {schema} is replaced by the schema name.
--
-- One row per pass of a declared backfill. A pass's batches move `cursor`, `rows` and `batches`
-- in the same transaction as the batch's own writes, under this row's lock, so the row always
-- says exactly what has been applied. A completed pass is never edited again: a forced re-run
-- is a new row. At most one pass per name is `running` (the partial unique index).
create table if not exists {schema}.backfill_passes (
    id          bigint generated always as identity primary key,
    name        text        not null,
    checksum    text        not null,                  -- of the declaration the pass started under
    ran_as      text,                                  -- the checksum of the last runner, when it differed
    environment text        not null,
    status      text        not null default 'running'
                check (status in ('running', 'completed', 'failed', 'stalled')),
    forced      boolean     not null default false,
    job_id      uuid,
    cursor      jsonb,
    rows        bigint      not null default 0,
    batches     bigint      not null default 0,
    remaining   bigint,                                -- what count() answered at the end (stalled)
    error       text,
    started_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    finished_at timestamptz
);

create unique index if not exists backfill_passes_one_running
    on {schema}.backfill_passes (name) where status = 'running';

create index if not exists backfill_passes_by_name
    on {schema}.backfill_passes (name, id desc);
