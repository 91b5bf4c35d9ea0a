-- 016: the outbox relay's tombstones. One row per staged id the queue has received from a relay,
-- kept after its job is gone (finished and purged, or removed): ENQUEUE_STAGED inserts a batch's
-- ids here first and inserts into jobs only the ids newly received, so a row moved again (a relay
-- that died before marking it published, or a lapsed lease) never becomes a second job. Two relays
-- moving one id serialise on the primary key. The relay purges them by received_at, a bounded batch
-- a statement, never sooner than it purges published rows in its sources (and not before 7 days).
-- Written to run again harmlessly. Placeholder {schema} is replaced by the schema name.
create table if not exists {schema}.outbox_received (
    id          uuid        primary key,
    received_at timestamptz not null default now()
);

create index if not exists outbox_received_at_idx on {schema}.outbox_received (received_at);
