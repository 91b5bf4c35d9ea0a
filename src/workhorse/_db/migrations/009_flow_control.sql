-- 009: flow control. Placeholder {schema} is replaced by the schema name.
--
-- flow_key: the key a Concurrency(key=) declaration answered at enqueue (null: none). A run holds
-- a slot of each cap it counts toward while it is 'running' with a lease that has not lapsed, so
-- the jobs table itself is the slot table: the heartbeat that renews a lease renews its slots,
-- and a killed holder's slots free when its lease lapses. Claims that enforce a cap are
-- serialised by one advisory lock per schema (FLOW_LOCK), taken in the statement before the
-- claim, so each counts what every earlier one committed.

alter table {schema}.jobs add column if not exists flow_key text;

-- flow_starts: one row per run started under a per-tenant rate, kept while it is inside the
-- window (the claim that enforces the rate deletes what has aged out). Read by tenant and time.
create table if not exists {schema}.flow_starts (
    tenant     text        not null,
    started_at timestamptz not null,
    job_id     uuid        not null
);

create index if not exists flow_starts_tenant_idx on {schema}.flow_starts (tenant, started_at);
