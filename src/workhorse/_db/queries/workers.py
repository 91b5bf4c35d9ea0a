"""Statements over ``{schema}.workers``, the registry of live worker processes."""

# Rows of workers gone are the retention purge's (Retention(workers=)), not the register's.
REGISTER = """
insert into {schema}.workers (id, host, pid, queues, concurrency, expires_at)
values (%(id)s, %(host)s, %(pid)s, %(queues)s::text[], %(concurrency)s::jsonb,
        now() + %(ttl)s * interval '1 second')
on conflict (id) do update
set last_seen_at = now(), expires_at = excluded.expires_at
"""

DEREGISTER = "delete from {schema}.workers where id = %(id)s"

LIVE = """
select w.id, w.host, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen_at, w.expires_at
from {schema}.workers as w
where w.expires_at > now()
order by w.started_at, w.id
"""
