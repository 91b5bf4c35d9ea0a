"""What database health reads (``pg_stat_user_tables``, ``pg_stat_activity``, prepared
transactions, replication slots); the vacuum itself is built per table in ``health/postgres.py``.

Design: docs/guides/vacuum.md
"""

# Every table of the schema with its live and dead rows and how long ago it was last vacuumed
# (by anyone: VACUUM or autovacuum), most dead rows first. Counts are the statistics collector's
# estimates, as autovacuum reads them.
TABLE_HEALTH = """
select s.relname::text as "table",
       s.n_live_tup as live,
       s.n_dead_tup as dead,
       extract(epoch from now() - greatest(s.last_vacuum, s.last_autovacuum))::float8 as vacuumed_ago,
       current_setting('autovacuum') = 'on' as autovacuum
from pg_stat_user_tables as s
where s.schemaname = %(schema)s::text
order by s.n_dead_tup desc, s.relname
"""

# What holds the vacuum horizon of this database back for longer than `after` seconds: sessions
# whose transaction holds a snapshot or a transaction id, prepared transactions, and replication
# slots holding an xmin older than `slot_age` transactions. Oldest first.
HORIZON_HOLDERS = """
select h.kind, h.pid, h.state, h.holder, h.age, h.query_start, h.query, h.name
from (
    select 'session'::text as kind, a.pid, coalesce(a.state, '')::text as state,
           concat_ws(' ', a.usename, nullif(a.application_name, ''))::text as holder,
           extract(epoch from now() - a.xact_start)::float8 as age,
           a.query_start, left(a.query, 200)::text as query, null::text as name
    from pg_stat_activity as a
    where coalesce(a.backend_xmin, a.backend_xid) is not null
      and a.datname = current_database()
      and a.pid <> pg_backend_pid()
      and a.xact_start < now() - %(after)s::float8 * interval '1 second'
    union all
    select 'prepared', null, 'prepared', p.owner::text,
           extract(epoch from now() - p.prepared)::float8, null, null, p.gid::text
    from pg_prepared_xacts as p
    where p.database = current_database()
      and p.prepared < now() - %(after)s::float8 * interval '1 second'
    union all
    select 'slot', r.active_pid, case when r.active then 'active' else 'inactive' end, r.slot_type::text,
           null, null, null, r.slot_name::text
    from pg_replication_slots as r
    where r.xmin is not null and age(r.xmin) > %(slot_age)s::int
) as h
order by h.age desc nulls last, h.pid
"""

# One table of the schema, on a connection of its own in autocommit (VACUUM runs in no
# transaction block). Identifiers are filled in quoted (psycopg.sql), never as text.
VACUUM_TABLE = "vacuum (skip_locked, analyze) {schema}.{table}"
