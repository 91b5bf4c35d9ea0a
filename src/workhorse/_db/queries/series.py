"""The per-minute counter series the dashboard's charts draw (``app.admin.counter_minutes``).

Design: docs/reference/schema.md
"""

COUNTER_MINUTES = """
select c.bucket, c.queue, sum(c.completed)::bigint as completed, sum(c.retried)::bigint as retried,
       sum(c.failed)::bigint as failed, sum(c.dead)::bigint as dead, sum(c.lapsed)::bigint as lapsed
from {schema}.counters as c
where c.tier = 'minute'
  and c.bucket >= date_trunc('minute', now(), 'UTC') - (%(minutes)s::int - 1) * interval '1 minute'
group by c.bucket, c.queue
order by c.bucket, c.queue collate "C"
"""
