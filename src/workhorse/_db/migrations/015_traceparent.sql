-- 015: the W3C traceparent of the context that enqueued (or staged) a job, when OpenTelemetry was
-- installed and a span was current then. The worker's span for each attempt continues that trace.
-- Nullable, never indexed: read only with the row. Placeholder {schema} is replaced by the schema.
alter table {schema}.jobs add column if not exists traceparent text;
