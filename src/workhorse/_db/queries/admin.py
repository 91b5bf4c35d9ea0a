"""Statements of the operator surface (``app.admin``): the list, the bulk verbs, queue pauses, the
snapshot ``stats`` reads, the counters rollup, and a run's progress report.

Design: docs/guides/operating.md
"""

from collections.abc import Iterable

from workhorse._db.queries.jobs import (
    JOB_COLUMNS,
    REMOVED_RELEASE,
    REPORTED_STATE,
    REQUEUED,
    WAKE_BEAT,
    WAKE_SWEEP,
    release_cte,
    wake_cte,
)

# -- the list ---------------------------------------------------------------------------------------
#
# A keyset page over the primary key, newest first: never OFFSET, so a page costs the same at the
# millionth row as at the first. Job ids are UUIDv7 (``workhorse.ids``): their leading 48 bits are
# the enqueuing process's clock in milliseconds, so id order is creation order and the cursor is
# the id alone. (Migration 008 dropped the (created_at, id) index this once walked: it cost an
# index entry on every insert, claim and settle.) A cursor is a POSITION in that order, not a row:
# the page is the rows beyond it whether or not a job with that id still exists (an operator
# removes or requeues the jobs a page shows, retention purges between two pages), so nothing here
# reads the cursor's row. What is no position at all (not a uuid) is refused before any statement
# runs. `created_at` stays the database clock, a column to show and filter on. The statement is
# assembled from the filters actually given (LIST_FILTERS), never `(%(x)s is null or ...)`: a plan
# cached for one combination would then serve another (a generic plan cannot tell an absent filter
# from a present one).

LIST_SELECT = "select " + JOB_COLUMNS + " from {schema}.jobs as j"

# Filter name -> condition. `id_prefix` is an inclusive uuid range (the prefix padded with 0s and
# with fs), which the primary key serves. The created_* window is a filter on the walk, not a range.
LIST_FILTERS: dict[str, str] = {
    "queue": "j.queue = %(queue)s",
    "name": "j.name = %(name)s",
    # `ls --name send_receipt`: that name, or the last dotted part of a module-qualified one
    # (`shop.jobs.send_receipt`); `name_like` is '%.' and the LIKE-escaped name. A filter on the
    # same primary-key walk as `name` (no index on name), so it costs what an exact name does.
    "name_part": "(j.name = %(name_part)s or j.name like %(name_like)s)",
    "tenant": "j.tenant = %(tenant)s",
    "state": REPORTED_STATE + " = %(state)s",
    "id_prefix": "j.id between %(id_low)s::uuid and %(id_high)s::uuid",
    "created_from": "j.created_at >= %(created_from)s::timestamptz",
    "created_to": "j.created_at < %(created_to)s::timestamptz",
    # Older than the cursor: read forwards (newest first). Newer than it: read backwards (oldest
    # first), and the caller reverses them. The cursor is the scan's start (its index condition).
    "after": "j.id < %(after)s::uuid",
    "before": "j.id > %(before)s::uuid",
}
LIST_NEWEST_FIRST = "order by j.id desc limit %(limit)s"
LIST_OLDEST_FIRST = "order by j.id limit %(limit)s"


def list_page(filters: Iterable[str], *, backwards: bool) -> str:
    """The page statement for these LIST_FILTERS names (each present once, in a stable order so
    each combination is one prepared statement). ``backwards``: the rows just newer than the
    ``before`` cursor, oldest first."""
    given = set(filters)
    conditions = [condition for name, condition in LIST_FILTERS.items() if name in given]
    where = (" where " + "\n  and ".join(conditions)) if conditions else ""
    return f"{LIST_SELECT}{where}\n{LIST_OLDEST_FIRST if backwards else LIST_NEWEST_FIRST}"


# -- a short id ------------------------------------------------------------------------------------
#
# A job by its short id (workhorse.ids.short_id: the low 24 bits of its id's millisecond `low`, its
# counter `counter`, three random digits `rand`). The millisecond's high 24 bits are not in it:
# each period of 2^24 ms (4.7 hours) from the newest job's back to the oldest's (at most %(periods)s
# of them, newest first) is one range of the primary key, the ids of that millisecond and counter
# (one a process), filtered by the random digits. So a short id needs no index of its own: one
# would take an entry on every claim and settle (they are not HOT updates), a third of a worker's
# throughput. The ends are read off jobs_pkey; uuid has no min/max.
SHORT_ID_LOOKUP = (
    """
with ends as (  -- the periods of the oldest and the newest ids: their first 24 bits
    select ('x' || left((select j.id::text from {schema}.jobs as j order by j.id limit 1), 6))::bit(24)::int as first,
           ('x' || left((select j.id::text from {schema}.jobs as j order by j.id desc limit 1), 6))::bit(24)::int
               as last
), periods as (  -- the id's first 18 characters: that millisecond, version 7, that counter
    select left(ms, 8) || '-' || right(ms, 4) || '-7' || %(counter)s as head
    from ends,
         generate_series(ends.last, greatest(ends.first, ends.last - %(periods)s + 1), -1) as p,
         lateral (select lpad(to_hex(p), 6, '0') || %(low)s as ms) as m
), hits as (  -- at most `limit` ids: the page is a primary-key lookup each, never a walk of the key
    select found.id
    from periods
    cross join lateral (  -- per period, one jobs_pkey range; the LIMIT keeps it a subquery a period
        select candidate.id
        from {schema}.jobs as candidate
        where candidate.id between (periods.head || '-0000-000000000000')::uuid
                               and (periods.head || '-ffff-ffffffffffff')::uuid
          and substr(candidate.id::text, 21, 3) = %(rand)s  -- the three random digits after the variant digit
        order by candidate.id desc
        limit %(limit)s
    ) as found
    order by found.id desc
    limit %(limit)s
)
select """
    + JOB_COLUMNS
    + """
from hits
join {schema}.jobs as j on j.id = hits.id
order by j.id desc
"""
)


# -- search: a payload field, an error's text ---------------------------------------------------------
#
# A payload search has no index (a GIN index on every payload would cost every enqueue an entry
# for a search an operator runs now and then): it is read on the list's own walk of the primary
# key, newest first from the cursor, and the walk is BOUNDED: each page examines the next
# %(scan)s rows in id order (`walked`), whatever they are, then keeps those that pass every filter
# (the list's and the search's: `hit`) and reads the page's hits back by primary key. An error
# search walks only the jobs that have an error, in the same order, through jobs_errored_idx
# (migration 020: an entry per job that ever failed an attempt, nothing for the others). A page
# costs the same at any table size and whatever matches. `walked_to` is the last row examined:
# when the budget ran out before the page filled, it is the next page's cursor ("searched 10,000
# jobs; Older → searches on"). `walked` is how many rows were examined.
SEARCH_FILTERS: dict[str, str] = {
    # payload @> the given object: {"order": 42} matches a payload with that field and value.
    "payload": "j.payload @> %(payload)s::jsonb",
    # the last error's type or message contains the text (case-insensitive; `error_like` is
    # '%' + the LIKE-escaped text + '%').
    "error": "(j.last_error ->> 'message' ilike %(error_like)s or j.last_error ->> 'type' ilike %(error_like)s)",
}
CURSORS = ("after", "before")


def search_page(filters: Iterable[str], searches: Iterable[str], *, backwards: bool) -> str:
    """The bounded search page for these LIST_FILTERS names and SEARCH_FILTERS names. One row per
    hit, newest first (oldest first ``backwards``), each with `walked_to` and `walked`; when
    nothing matched, one row of nulls carrying them."""
    given, wanted = set(filters), set(searches)
    walk = [condition for name, condition in LIST_FILTERS.items() if name in given and name in CURSORS]
    if "error" in wanted:
        walk.append("j.last_error is not null")  # jobs_errored_idx: only the jobs that ever failed
    where = (" where " + " and ".join(walk)) if walk else ""
    tests = [condition for name, condition in LIST_FILTERS.items() if name in given and name not in CURSORS]
    tests += [condition for name, condition in SEARCH_FILTERS.items() if name in wanted]
    hit = "\n             and ".join(tests) or "true"
    order, last = ("asc", "max") if backwards else ("desc", "min")
    return f"""
with walked as materialized (
    select j.id, ({hit}) as hit
    from {{schema}}.jobs as j{where}
    order by j.id {order}
    limit %(scan)s
), hits as (
    select walked.id from walked where walked.hit order by walked.id {order} limit %(limit)s
), walk as (
    -- uuid has no min/max; a canonical uuid's text sorts as the uuid does
    select {last}(walked.id::text) as walked_to, count(*) as walked from walked
)
select {JOB_COLUMNS}, walk.walked_to, walk.walked
from walk
left join hits on true
left join {{schema}}.jobs as j on j.id = hits.id  -- a primary-key lookup per hit
order by j.id {order} nulls last
"""


# -- bulk verbs -------------------------------------------------------------------------------------
#
# Each verb is ONE statement that counts the movable rows and moves the oldest `limit` of them
# (by id, that is by creation), so a call costs one round trip whatever it moves. Rows are taken with
# SKIP LOCKED: a row a worker is settling right now is skipped and stays movable for the next call.
# The match is repeated on the locked row, so a row that changed since the statement's snapshot is
# re-checked (and skipped when it no longer matches). `dry_run` moves nothing. The answer:
# `movable` (before the call) and `moved`; remaining = movable - moved.
#
# Matching: the REPORTED state, and queue / name / tenant when given. `stored` is the stored
# states that can report as the asked one ('ready' covers due delayed and suspended rows).
BULK_MATCH = (
    """j.state = any(%(stored)s::text[])
      and """
    + REPORTED_STATE
    + """ = %(state)s
      and (%(queue)s::text is null or j.queue = %(queue)s)
      and (%(name)s::text is null or j.name = %(name)s)
      and (%(tenant)s::text is null or j.tenant = %(tenant)s)"""
)


def bulk_statement(ctes: str, *, wake: str | None, extra: str = "") -> str:
    """One bulk verb: its CTEs (`movable`, then `picked`, then `moved`, which answers each moved
    row's `queue` when the verb wakes them) and the answer: movable rows before the call, rows
    moved, and queues woken. ``wake``: the NOTIFY payload's prefix (``wake_cte``), None for none."""
    woken = "0" if wake is None else "(select count(*) from wake)"
    wake = "" if wake is None else ", " + wake_cte(prefix=wake)
    return f"""
with {ctes.strip()}{wake}
select (select count(*) from movable) as movable, (select count(*) from moved) as moved, {woken} as woken{extra}
"""


def moved(change: str, returning: str = "j.queue") -> str:
    """The last CTE of every bulk verb: ``change`` (an UPDATE ... SET or a DELETE on `jobs as j`)
    applied to the picked rows, answering each one's queue (for the wake), or ``returning``."""
    return (
        """moved as (
    """
        + change.strip()
        + """
    where j.id = any(array(select picked.id from picked))
    returning """
        + returning
        + """
)"""
    )


def bulk_simple(
    change: str, *, extra: str = "", wake: str | None, returning: str = "j.queue", tail: str = "", answer: str = ""
) -> str:
    """Remove, promote and cancel: every row matching BULK_MATCH (and ``extra``) is movable; the
    oldest `limit` of them are picked, locked, and changed by ``change``. The pick is read
    straight off the primary key in id (creation) order, so it stops after `limit` rows."""
    return bulk_statement(
        """
movable as (
    select j.id from {schema}.jobs as j where """
        + BULK_MATCH
        + extra
        + """
), picked as (
    select j.id
    from {schema}.jobs as j
    where not %(dry_run)s and """
        + BULK_MATCH
        + extra
        + """
    order by j.id
    limit %(limit)s
    for update skip locked
), """
        + moved(change, returning)
        + tail,
        wake=wake,
        extra=answer,
    )


# Requeue finished rows: the REQUEUE effect (fresh run, attempts reset, progress cleared; steps
# replay). A row whose (name, tenant, key) a LIVE job holds is not movable (the live-key index
# would refuse it: jobs_live_key_idx serves the check), and of several matching rows sharing one
# key only the oldest is, so a call never trips over its own rows and "call until remaining is 0"
# ends. Wakes the queues it filled.
BULK_REQUEUE = bulk_statement(
    """
matching as (
    select j.id, j.name, coalesce(j.tenant, '') as tenant, j.idempotency_key as key,
           row_number() over (
               partition by j.name, coalesce(j.tenant, ''), j.idempotency_key
               order by j.id) as nth
    from {schema}.jobs as j
    where """
    + BULK_MATCH
    + """
), movable as (
    select m.id
    from matching as m
    where m.key is null
       or (m.nth = 1 and not exists (
               select 1 from {schema}.jobs as l
               where l.name = m.name and coalesce(l.tenant, '') = m.tenant and l.idempotency_key = m.key
                 and l.state in ('ready', 'delayed', 'running', 'suspended')))
), picked as (
    select j.id
    from movable as m join {schema}.jobs as j on j.id = m.id
    where not %(dry_run)s and """
    + BULK_MATCH
    + """
    order by m.id
    limit %(limit)s
    for update of j skip locked
), """
    + moved("update {schema}.jobs as j set " + REQUEUED),
    wake="",
)

# Delete matching rows (never running: the verb is refused that state earlier, and the stored
# state is in the match); their steps go with them (on delete cascade).
BULK_REMOVE = bulk_simple(
    "delete from {schema}.jobs as j",
    wake=None,
    returning="j.id, j.queue, j.state, j.has_dependents",
    tail=", " + release_cte("moved", REMOVED_RELEASE.format(rows="moved"), channel=True),
    answer=", (select cardinality(released.queues) from released) as released",
)

# Make waiting rows due now: only rows still waiting (stored ready or delayed, run_at ahead).
# Wakes the queues.
BULK_PROMOTE = bulk_simple(
    "update {schema}.jobs as j set state = 'ready', run_at = now(), updated_at = now()",
    extra=" and j.state in ('ready', 'delayed') and j.run_at > now()",
    wake="",
)

# Cancel live rows: the CANCEL effect. A running row's worker loses its claim (its settle and
# heartbeat miss) and cancels the body at its next heartbeat, which the `beat:` NOTIFY brings
# forward to now.
# Their waiting dependents are released as CANCEL's are (``release_cte``), in the same statement.
BULK_CANCEL = bulk_simple(
    "update {schema}.jobs as j set state = 'cancelled', worker_id = null, lease_expires_at = null, "
    "finished_at = now(), updated_at = now()",
    wake=WAKE_BEAT,
    returning="j.id, j.queue, j.has_dependents",
    tail=", " + release_cte("moved", "'cancelled'", channel=True),
    answer=", (select cardinality(released.queues) from released) as released",
)

BULK: dict[str, str] = {
    "requeue": BULK_REQUEUE,
    "remove": BULK_REMOVE,
    "promote": BULK_PROMOTE,
    "cancel": BULK_CANCEL,
}

# -- queue pauses -----------------------------------------------------------------------------------

# Idempotent: a second pause keeps the first paused_at, and its reason only when it gives none.
PAUSE = """
insert into {schema}.queue_pauses as p (queue, reason)
values (%(queue)s, %(reason)s)
on conflict (queue) do update set reason = coalesce(excluded.reason, p.reason)
returning p.queue, p.paused_at, p.reason
"""

# Resume: delete the row and, when one went, wake the queue's idle workers (they may have slept
# with nothing claimable) in the same statement. A sweep wake: while the queue was paused the
# workers' claims did not look at its delayed jobs either, so they must learn when those come due.
RESUME = (
    """
with moved as (
    delete from {schema}.queue_pauses as p
    where p.queue = %(queue)s
    returning p.queue
), """
    + wake_cte(prefix=WAKE_SWEEP)
    + """
select (select count(*) from moved) as resumed, (select count(*) from wake) as woken
"""
)

# By queue in code point order (collate "C"), whatever the database's collation: as Python sorts.
PAUSES = """
select p.queue, p.paused_at, p.reason
from {schema}.queue_pauses as p
order by p.queue collate "C"
"""

# -- measuring --------------------------------------------------------------------------------------

# Everything `stats` reads, in ONE statement (one snapshot, one now()), one row per record:
#   now      the database clock, and the live workers (registry rows not expired) in `n`
#   state    jobs per (queue, name, REPORTED state) in `n`, and their smallest run_at in `at`;
#            only rows stored in the live states, 'dead' and 'failed' ('done' and 'cancelled'
#            are history, which the counters carry)
#   counter  attempt outcomes per (queue, name), summed over every tier's buckets from `since`
#            seconds ago (null: all of them)
#   pause    a paused queue: paused_at in `at`, its reason
# Each kind is ordered by (queue, name, state) in code point order (collate "C"), as Python sorts.
#
# The state counts read only the rows they count, never the finished history beside them: one
# grouped branch per partial index, each repeating that index's predicate literally (so the
# planner can prove it): ready/delayed/suspended by jobs_due_idx, running by
# jobs_running_lease_idx, dead/failed by jobs_failures_idx (migration 011), which holds every
# column that branch reads, so it is an index-only scan. One filter on all six states matches no
# partial index and seq-scans jobs (at 2,000,000 finished rows, about a second a scrape). A
# stored state is in exactly one branch and a reported state comes from one branch only ('ready'
# from the first), so the branches' groups never overlap. Dead and failed rows are kept only as
# long as retention says (7 and 14 days by default): that branch is bounded too.
SNAPSHOT = (
    """
with states as (
    select j.queue, j.name, """
    + REPORTED_STATE
    + """ as state, count(*) as n, min(j.run_at) as at
    from {schema}.jobs as j
    where j.state in ('ready', 'delayed', 'suspended')
    group by 1, 2, 3
    union all
    -- a running row whose lease lapsed counts apart ('lapsed'), with the earliest lapse as `at`
    select j.queue, j.name, case when j.lease_expires_at < now() then 'lapsed' else 'running' end, count(*),
           min(case when j.lease_expires_at < now() then j.lease_expires_at else j.run_at end)
    from {schema}.jobs as j
    where j.state = 'running'
    group by 1, 2, 3
    union all
    select j.queue, j.name, j.state, count(*), min(j.run_at)
    from {schema}.jobs as j
    where j.state in ('dead', 'failed')
    group by 1, 2, 3
), sums as (
    select c.queue, c.name, sum(c.completed)::bigint as completed, sum(c.retried)::bigint as retried,
           sum(c.failed)::bigint as failed, sum(c.dead)::bigint as dead, sum(c.lapsed)::bigint as lapsed
    from {schema}.counters as c
    where c.tier in ('minute', 'hour', 'day')
      and (%(since)s::float8 is null or c.bucket >= now() - %(since)s::float8 * interval '1 second')
    group by c.queue, c.name
), records as (
    select 'now' as kind, null::text as queue, null::text as name, null::text as state,
           (select count(*) from {schema}.workers as w where w.expires_at > now()) as n, now() as at,
           null::text as reason, null::bigint as completed, null::bigint as retried, null::bigint as failed,
           null::bigint as dead, null::bigint as lapsed
    union all
    select 'state', queue, name, state, n, at, null, null, null, null, null, null from states
    union all
    select 'counter', queue, name, null, null, null, null, completed, retried, failed, dead, lapsed from sums
    union all
    select 'pause', p.queue, null, null, null, p.paused_at, p.reason, null, null, null, null, null
    from {schema}.queue_pauses as p
)
select r.kind, r.queue, r.name, r.state, r.n, r.at, r.reason, r.completed, r.retried, r.failed, r.dead, r.lapsed
from records as r
order by r.kind, r.queue collate "C", r.name collate "C", r.state
"""
)

# The rollup: two folds, each ONE statement that deletes the old rows of a tier and adds their sums
# into the coarser tier's rows. A row is locked (SKIP LOCKED: another rollup folding it right now
# keeps it), deleted and added in one transaction, so a fold can run any number of times, from
# any number of processes, and never counts a row twice. Upserts in (bucket, queue, name) order:
# two folds never deadlock. Buckets are truncated in UTC. Day rows are kept.


def rollup(source: str, target: str, cutoff: str) -> str:
    """The fold of ``source`` tier rows older than ``cutoff`` (an SQL expression) into ``target``."""
    return f"""
with doomed as (
    select c.tier, c.bucket, c.queue, c.name
    from {{schema}}.counters as c
    where c.tier = '{source}' and c.bucket < {cutoff}
    order by c.bucket, c.queue, c.name
    for update skip locked
), moved as (
    delete from {{schema}}.counters as c
    using doomed as d
    where c.tier = d.tier and c.bucket = d.bucket and c.queue = d.queue and c.name = d.name
    returning c.bucket, c.queue, c.name, c.completed, c.retried, c.failed, c.dead, c.lapsed
), folded as (
    insert into {{schema}}.counters as c (tier, bucket, queue, name, completed, retried, failed, dead, lapsed)
    select '{target}', date_trunc('{target}', m.bucket, 'UTC') as bucket, m.queue, m.name,
           sum(m.completed), sum(m.retried), sum(m.failed), sum(m.dead), sum(m.lapsed)
    from moved as m
    group by 2, m.queue, m.name
    order by 2, m.queue, m.name
    on conflict (tier, bucket, queue, name) do update
    set completed = c.completed + excluded.completed, retried = c.retried + excluded.retried,
        failed = c.failed + excluded.failed, dead = c.dead + excluded.dead, lapsed = c.lapsed + excluded.lapsed
)
select count(*) as folded from moved
"""


# Minutes older than two hours fold into hours; hours older than two days into days. The cutoff
# is truncated to the target tier, so an hour (a day) folds once all of its minutes (hours) are old.
ROLLUP_MINUTES = rollup("minute", "hour", "date_trunc('hour', now() - interval '2 hours', 'UTC')")
ROLLUP_HOURS = rollup("hour", "day", "date_trunc('day', now() - interval '2 days', 'UTC')")

# -- progress ---------------------------------------------------------------------------------------

# Runs' progress reports, a worker's whole batch in one statement, each fenced on its claim like a
# settle: a report lands only while this worker still holds this claim of the running row. Not a
# state change: updated_at stays. The fence state comes from `p` for the reason SETTLE_MANY gives.
RECORD_PROGRESS = """
with p as materialized (
    select 'running'::text as fenced, t.id, t.worker_id, t.claim, t.progress::jsonb as progress, t.n
    from unnest(%(ids)s::uuid[], %(worker_ids)s::text[], %(claims)s::int[], %(progresses)s::text[])
        with ordinality as t(id, worker_id, claim, progress, n)
)
update {schema}.jobs as j
set progress = p.progress
from p
where j.id = p.id and j.state = p.fenced and j.worker_id = p.worker_id and j.claims = p.claim
returning p.n  -- which report landed (a job named twice is still answered per report)
"""
