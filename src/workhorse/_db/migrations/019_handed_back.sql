-- 019: the last hand-back of a job (workhorse.worker: a drain's cut-off, a body's ctx.hand_back(),
-- a job claimed ahead and never started): {at, worker, reason, attempt}, written by SETTLE_MANY's
-- 'interrupted' outcome and kept after (history: `show` and the dashboard print it). Null: never.
-- A nullable column without a default: adding it rewrites nothing.

alter table {schema}.jobs add column if not exists handed_back jsonb;
