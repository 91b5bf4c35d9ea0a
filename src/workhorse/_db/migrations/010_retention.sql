-- 010: retention. Placeholder {schema} is replaced by the schema name.
--
-- The purge deletes finished jobs by state, oldest finish first, in small batches: this partial
-- index is what each batch walks (and what stats reads for the dead and failed counts), so a
-- purge of millions of rows never scans the live ones. It costs one index entry per finished
-- job, written by the settle that finishes it; live rows are not in it.

create index if not exists jobs_finished_idx
    on {schema}.jobs (state, finished_at)
    where state in ('done', 'failed', 'dead', 'cancelled');
