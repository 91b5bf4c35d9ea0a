-- 005: run_at defaults to the database clock, so a batch enqueued with COPY (no delay, no key)
-- can leave it out and still be due at the server time of its insert.

alter table {schema}.jobs alter column run_at set default now();
