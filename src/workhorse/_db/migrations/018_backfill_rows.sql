-- 018: a backfill pass's `rows` may be unknown (null). A batch whose function answers a bare
-- cursor is counted by the rows its transaction wrote (pg_stat_xact_user_tables); where the
-- server keeps no such counts (track_counts off) the batch's rows are unknown, and so is the
-- pass's total from then on: "not reported", never a false 0.

alter table {schema}.backfill_passes alter column rows drop not null;
