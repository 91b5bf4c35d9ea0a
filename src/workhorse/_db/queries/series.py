"""The per-minute counter series the dashboard's charts draw (``app.admin.counter_minutes``).

COUNTER_MINUTES sums the 'minute' tier rows of the last ``minutes`` minutes per (bucket, queue),
over the queue's job names: at most minutes x queues rows to answer (a chart a queue). It is a
range scan of the counters primary key (tier, bucket, queue, name): ``tier`` equal, ``bucket``
from a bound, so it reads only the hour's rows, however long the history beside them. Minute rows
are folded into hours only when older than two hours (ROLLUP_MINUTES), so the last hour is always
in the minute tier.
Ordered by bucket, then queue in code point order (as Python sorts)."""

COUNTER_MINUTES = """
select c.bucket, c.queue, sum(c.completed)::bigint as completed, sum(c.retried)::bigint as retried,
       sum(c.failed)::bigint as failed, sum(c.dead)::bigint as dead, sum(c.lapsed)::bigint as lapsed
from {schema}.counters as c
where c.tier = 'minute'
  and c.bucket >= date_trunc('minute', now(), 'UTC') - (%(minutes)s::int - 1) * interval '1 minute'
group by c.bucket, c.queue
order by c.bucket, c.queue collate "C"
"""
