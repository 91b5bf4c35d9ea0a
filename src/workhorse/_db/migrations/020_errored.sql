-- 020: the jobs that ever failed an attempt (a last_error), in id order: an error search
-- (admin_sql.search_page) walks these alone, newest first, a bounded stretch a page, instead of
-- every job. One entry per job with an error (failures are rare: nothing for the jobs that never
-- failed); a settle that leaves last_error unchanged keeps a row's update HOT-eligible.

create index if not exists jobs_errored_idx on {schema}.jobs (id) where last_error is not null;
