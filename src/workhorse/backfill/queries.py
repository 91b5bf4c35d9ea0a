"""The backfill ledger (``workhorse.backfill``): ``{schema}.backfill_passes``, one row per pass.

Design: docs/guides/backfills.md
"""

LOCK_NAME = "select pg_advisory_xact_lock(hashtext('workhorse:backfill:' || %(schema)s || ':' || %(name)s))"

LEDGER_COLUMNS = """p.id, p.name, p.checksum, p.ran_as, p.environment, p.status, p.forced, p.job_id::text as job_id,
       p.cursor, p.rows, p.batches, p.remaining, p.error, p.started_at, p.updated_at, p.finished_at"""

# The running pass of a name, with its job's state (null: the job is gone).
RUNNING_ROW = f"""
select {LEDGER_COLUMNS}, j.state as job_state
from {{schema}}.backfill_passes as p
left join {{schema}}.jobs as j on j.id = p.job_id
where p.name = %(name)s and p.status = 'running'
"""

# The newest completed pass of a name in one environment.
COMPLETED_ROW = """
select p.id, p.finished_at
from {schema}.backfill_passes as p
where p.name = %(name)s and p.status = 'completed' and p.environment = %(environment)s
order by p.id desc
limit 1
"""

INSERT_ROW = """
insert into {schema}.backfill_passes (name, checksum, environment, forced)
values (%(name)s, %(checksum)s, %(environment)s, %(forced)s)
returning id
"""

SET_JOB = "update {schema}.backfill_passes set job_id = %(job_id)s::uuid where id = %(id)s"

# A batch's first statement: the pass's row, locked until the batch commits or rolls back.
LOCK_ROW = """
select p.status, p.cursor, p.rows, p.batches
from {schema}.backfill_passes as p
where p.id = %(id)s
for update
"""

# What a batch wrote: read in its transaction just before and just after the function runs (so
# neither LOCK_ROW nor CHECKPOINT is in the difference): rows inserted, updated or deleted so far
# by this transaction in any table (pg_stat_xact_user_tables: this backend's counters of the open
# transaction, cheap to read). Null when the server keeps no counts (track_counts off): the batch's
# rows are then unknown, not 0.
ROWS_WRITTEN = """
select case when current_setting('track_counts')::boolean
            then coalesce(sum(t.n_tup_ins + t.n_tup_upd + t.n_tup_del), 0)::bigint end as written
from pg_stat_xact_user_tables as t
"""

# A batch's last statement, in the batch's transaction. `status` running, completed or stalled.
# A batch of unknown rows (null) makes the pass's total unknown from then on (migration 018).
CHECKPOINT = """
update {schema}.backfill_passes
set cursor = coalesce(%(cursor)s::jsonb, cursor),  -- the sweep's end keeps the last cursor
    rows = rows + %(rows)s::bigint,
    batches = batches + 1,
    status = %(status)s::text,
    remaining = %(remaining)s,
    error = %(error)s,
    finished_at = case when %(status)s::text = 'running' then null else now() end,
    updated_at = now()
where id = %(id)s and status = 'running'
"""

# A runner whose declaration differs from the one the pass started under says so on the row.
RAN_AS = """
update {schema}.backfill_passes
set ran_as = %(checksum)s, updated_at = now()
where id = %(id)s and checksum <> %(checksum)s and ran_as is distinct from %(checksum)s
"""

# The pass ended failed: its last attempt failed, a gate refused, or (found by the next start)
# its job ended without finishing it.
FAIL_ROW = """
update {schema}.backfill_passes
set status = 'failed', error = %(error)s, finished_at = now(), updated_at = now()
where id = %(id)s and status = 'running'
"""

READ_ROW = f"""
select {LEDGER_COLUMNS}, j.state as job_state, j.progress
from {{schema}}.backfill_passes as p
left join {{schema}}.jobs as j on j.id = p.job_id
where p.id = %(id)s
"""

# The newest pass of each name, with its job's state and progress.
LATEST_ROWS = f"""
select distinct on (p.name) {LEDGER_COLUMNS}, j.state as job_state, j.progress
from {{schema}}.backfill_passes as p
left join {{schema}}.jobs as j on j.id = p.job_id
where p.name = any(%(names)s::text[])
order by p.name, p.id desc
"""

# Which of these names have a completed pass in this environment.
COMPLETED_NAMES = """
select distinct p.name
from {schema}.backfill_passes as p
where p.status = 'completed' and p.environment = %(environment)s and p.name = any(%(names)s::text[])
"""

# `requires="workhorse:N"`: our own migration ledger.
OUR_MIGRATION = "select exists (select 1 from {schema}.migrations as m where m.version = %(version)s) as applied"

# `requires=AppMigration(table, column=value, ...)`: the app's own ledger. {table} and {where}
# are composed from identifiers (psycopg.sql), the values are parameters.
APP_MIGRATION = "select exists (select 1 from {table} where {where}) as applied"
# to_regclass: a ledger table that does not exist is "not applied", not an error.
TABLE_EXISTS = "select to_regclass(%(table)s) is not null as present"

# First in each batch's transaction (SET LOCAL: it ends with the transaction, so a pooled connection
# never carries it to its next client): the transaction may sit idle (its function awaiting something other
# than this connection) at most this long before the server ends the session, so a runner frozen
# inside a batch releases the ledger row's lock and the batch rolls back.
IDLE_IN_BATCH = "set local idle_in_transaction_session_timeout = '60s'"
