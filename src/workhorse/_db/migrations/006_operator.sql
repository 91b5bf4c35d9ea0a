-- 006: the operator surface. Placeholder {schema} is replaced by the schema name.
--
-- queue_pauses: one row per paused queue. Every claim (CLAIM, CLAIM_DUE) drops a paused queue
-- from what it wants, so nothing is taken from it until the row is deleted (resume). Running jobs
-- are not touched. A second pause keeps the first paused_at.

create table if not exists {schema}.queue_pauses (
    queue     text        primary key,
    paused_at timestamptz not null default now(),
    reason    text
);

-- counters: attempt outcomes per (queue, job name) and time bucket, moved by the statements that
-- settle rows (SETTLE_MANY; CLAIM for buried and lapsed leases) in the same statement, never in a
-- second round trip. Settles write the current 'minute' bucket; rollup_counters folds minutes older
-- than two hours into 'hour' rows and hours older than two days into 'day' rows, each fold one
-- delete-and-upsert statement, so no count is ever folded twice. Buckets are UTC.
-- fillfactor: a busy minute row is updated by every settle batch; free room on its page keeps
-- those updates HOT (no index entry per update).

create table if not exists {schema}.counters (
    tier      text        not null,
    bucket    timestamptz not null,
    queue     text        not null,
    name      text        not null,
    completed bigint      not null default 0,
    retried   bigint      not null default 0,
    failed    bigint      not null default 0,
    dead      bigint      not null default 0,
    lapsed    bigint      not null default 0,
    primary key (tier, bucket, queue, name),
    constraint counters_tier_known check (tier in ('minute', 'hour', 'day'))
) with (fillfactor = 50);

-- errors: the failed attempts' errors, oldest first, at most ten: {attempt, type, message, at}.
-- last_error keeps the latest whole, with its traceback. Null means none.

alter table {schema}.jobs add column if not exists errors jsonb;
