-- 017: the retention purge of the webhooks delivery ledger (workhorse.retention's
-- webhook_deliveries target). Placeholder {schema} is replaced by the schema name.
--
-- The purge picks the ledger's rows older than its age by their attempt time, oldest first, a
-- small batch per statement: this index lets each batch walk from the oldest row instead of
-- scanning the whole ledger.

create index if not exists webhook_deliveries_created_idx
    on {schema}.webhook_deliveries (created_at);
