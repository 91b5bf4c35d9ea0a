-- 018: a job's short id (workhorse.ids.short_id), the last 12 hex digits of its UUIDv7: 48 random
-- bits, unlike the leading time digits jobs made together share. `workhorse show 5f6a7b8c9d0e`
-- finds its job through this index (admin_sql.LIST_FILTERS "short_id" is this exact expression),
-- one entry a row, in a b-tree of 12-character keys; a uuid's text form never changes, so the
-- expression is immutable.

create index if not exists jobs_short_id_idx on {schema}.jobs (right(id::text, 12));
