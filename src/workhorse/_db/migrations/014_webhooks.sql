-- 014: webhooks (workhorse.webhooks). Placeholder {schema} is replaced by the schema name.
--
-- An endpoint is one receiver URL of one tenant, with the secret its deliveries are signed with.
-- The secret lives in this row and nowhere else: a delivery job's payload names the endpoint by
-- id and the delivery reads the secret when it signs. `previous_secret` signs too until
-- `previous_expires_at` (a rotation's grace period). `disable_after` null means the app's policy.

create table if not exists {schema}.webhook_endpoints (
    id                   uuid        primary key,
    tenant               text,
    url                  text        not null,
    events               text[],
    secret               text        not null,
    previous_secret      text,
    previous_expires_at  timestamptz,
    disable_after        integer,
    enabled              boolean     not null default true,
    disabled_reason      text,
    disabled_at          timestamptz,
    consecutive_failures integer     not null default 0,
    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    constraint webhook_endpoints_disable_after_sane check (disable_after is null or disable_after >= 1)
);

create index if not exists webhook_endpoints_tenant_idx on {schema}.webhook_endpoints (tenant, id);

-- The delivery ledger: one row per attempt that reached a verdict (a cancelled or lease-lost
-- attempt writes none), newest first by id for keyset pages per endpoint.
create table if not exists {schema}.webhook_deliveries (
    id            bigint      generated always as identity primary key,
    endpoint_id   uuid        not null references {schema}.webhook_endpoints (id) on delete cascade,
    job_id        uuid        not null,
    message_id    text        not null,
    event         text        not null,
    attempt       integer     not null,
    status        text        not null,
    response_code integer,
    latency_ms    double precision,
    response_excerpt text,
    error         text,
    created_at    timestamptz not null default now(),
    constraint webhook_deliveries_status_known check (
        status in ('delivered', 'failed', 'throttled', 'gone', 'refused', 'skipped')
    )
);

create index if not exists webhook_deliveries_endpoint_idx
    on {schema}.webhook_deliveries (endpoint_id, id desc);
