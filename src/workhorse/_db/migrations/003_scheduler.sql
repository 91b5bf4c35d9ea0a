-- 003: cron tasks and the scheduler lease. Placeholder {schema} is replaced by the schema name.
--
-- tasks: one row per declared task, written only by the scheduler leader. The watermark is the
-- fence of every fire: each occurrence at or before it has been fired (or skipped by the catch-up
-- policy), and a fire moves it forward in the same statement that inserts the job, from the
-- value the leader planned with. A second fire of the same occurrence finds it moved and inserts
-- nothing.

create table if not exists {schema}.tasks (
    name          text        primary key,
    schedule      text        not null,
    timezone      text        not null,
    catch_up      text        not null,
    watermark     timestamptz not null,
    next_at       timestamptz,
    last_fired_at timestamptz,
    last_job_id   uuid,
    fired         bigint      not null default 0,
    registered_at timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    constraint tasks_catch_up_known check (catch_up in ('skip', 'run-once'))
);

-- leaders: one lease row per role (the scheduler is the only role today). The holder renews it
-- every round, and anyone may take it once expires_at has passed, which bumps the epoch. A fire
-- names the epoch it was planned under, so a leader that was frozen past its lease fires nothing.
-- A row, never a session advisory lock: it needs no connection affinity and survives poolers.

create table if not exists {schema}.leaders (
    role        text        primary key,
    holder      text        not null,
    epoch       bigint      not null,
    host        text,
    pid         integer,
    acquired_at timestamptz not null,
    renewed_at  timestamptz not null,
    expires_at  timestamptz not null
);
