"""The per-minute counter series the dashboard's charts draw (``app.admin.counter_minutes``).

COUNTER_MINUTES reads the 'minute' tier rows of the last ``minutes`` minutes, one per (bucket,
queue, job name). It is a range scan of the counters primary key (tier, bucket, queue, name):
``tier`` equal, ``bucket`` from a bound, so it reads only the rows it answers (at most minutes x
queues x names), however long the history beside them. Minute rows are folded into hours only
when older than two hours (ROLLUP_MINUTES), so the last hour is always in the minute tier.
Ordered by bucket, then queue and name in code point order (as Python sorts)."""

COUNTER_MINUTES = """
select c.bucket, c.queue, c.name, c.completed, c.retried, c.failed, c.dead, c.lapsed
from {schema}.counters as c
where c.tier = 'minute'
  and c.bucket >= date_trunc('minute', now(), 'UTC') - (%(minutes)s::int - 1) * interval '1 minute'
order by c.bucket, c.queue collate "C", c.name collate "C"
"""
