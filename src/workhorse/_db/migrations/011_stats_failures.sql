-- 011: the dead and failed counts of stats, read from an index alone. Placeholder {schema} is
-- replaced by the schema name.
--
-- SNAPSHOT (queries/admin.py) counts dead and failed jobs per (queue, name, state) with their
-- smallest run_at. jobs_finished_idx (010) finds those rows but not those columns: every row
-- counted was a heap visit, scattered over the whole table (at 120,000 such rows among 2,000,000
-- finished ones, about 10,000 pages per scrape). This index holds exactly the columns counted,
-- in the order grouped, so the count is an index-only scan that streams its groups. It costs one
-- index entry per job buried or failed for good (rare outcomes); retention bounds how many are
-- kept (failed 7 days, dead 14 days by default).

create index if not exists jobs_failures_idx
    on {schema}.jobs (queue, name, state, run_at)
    where state in ('dead', 'failed');
