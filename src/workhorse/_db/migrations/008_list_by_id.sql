-- 008: the operator list and the bulk verbs walk the primary key, in id order. Job ids are UUIDv7,
-- so id order is creation order (by the enqueuing process's clock, to the millisecond), and the
-- (created_at, id) index they walked before is dropped: it cost one index entry on every insert,
-- claim and settle, and grew with every finished row kept. created_at stays, as a column.

drop index if exists {schema}.jobs_created_idx;
