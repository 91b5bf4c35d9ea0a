"""Statements over ``{schema}.jobs``: enqueue, claim, heartbeat, settle, the one-job verbs; time is ``now()``.
Statements the operator surface alone runs (list, bulk verbs, pauses, snapshot) are in ``admin``.

Design: docs/how-it-works/leases.md, docs/how-it-works/architecture.md
"""

from workhorse.types import ERRORS_KEPT

LIVE_STATES = ("ready", "delayed", "running", "suspended")

# The state a person reads: a due 'delayed' or 'suspended' row is 'ready' (the claim treats them
# alike once run_at has passed). Every read and every state filter of the operator surface uses it.
REPORTED_STATE = "(case when j.state in ('delayed', 'suspended') and j.run_at <= now() then 'ready' else j.state end)"


# The NOTIFY payloads on the jobs channel (the listener reads them):
#   <queue>          a job of the queue is due now: an idle worker claims due jobs at once.
#   sweep:<queue>    a job's due time was set (a delayed enqueue) or may have moved out of a
#                    worker's sight (a resumed queue): the worker runs its full claim, which
#                    also answers when the next job comes due, so it wakes for that.
# A queue literally named "sweep:..." at worst costs a worker one needless claim. INSERT_ONE and
# INSERT_MANY spell the prefix out in their SQL.
WAKE_SWEEP = "sweep:"
WAKE_BEAT = "beat:"


def wake_cte(rows: str = "moved", *, prefix: str = "") -> str:
    """A `wake` CTE: one NOTIFY on the jobs channel per distinct queue of the CTE ``rows`` (which
    answers `queue`), so the queue's idle workers claim at once. The payload is ``prefix`` and the
    queue name: no prefix, a job is due now; ``WAKE_SWEEP``, a due time changed; ``WAKE_BEAT``, a
    job was cancelled (its worker renews at once and learns it lost the job). Skipped when the
    server's notification queue is half full: a full queue makes COMMIT fail, and a missed wake
    costs only a poll (or a heartbeat). Reference it (count its rows) or it does not run."""
    payload = f"'{prefix}' || q.queue" if prefix else "q.queue"
    return f"""wake as (
    select pg_notify(%(channel)s, {payload})
    from (select distinct {rows}.queue from {rows}) as q
    where pg_notification_queue_usage() < 0.5
)"""


def errors_appended(error: str) -> str:
    """``j.errors`` with one more attempt's error (``error``: a jsonb expression {type, message,
    ...}) appended, keeping the last ERRORS_KEPT. No traceback: that stays in last_error. ``at`` is
    the statement's now(), in the session's time zone (UTC on every workhorse connection)."""
    return (
        "jsonb_path_query_array(coalesce(j.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
        f"'attempt', j.attempt, 'type', {error} -> 'type', 'message', {error} -> 'message', 'at', now())), "
        f"'lax $[last - {ERRORS_KEPT - 1} to last]')"
    )


# What the claim writes when a lease lapsed on the final attempt (every worker that took the job died).
LAPSED_ERROR = """jsonb_build_object(
            'type', 'LeaseLapsed',
            'message', 'the lease lapsed on the final attempt (' || j.attempt || ' of ' || j.max_attempts
                || '): every worker that took this job stopped heartbeating, most likely it died',
            'traceback', null)"""

# The SET of every statement that buries a job whose lease lapsed on its final attempt (the claim,
# the flow claim and the rescuer): each adds its own fence and RETURNING.
BURY_LAPSED = (
    """set state = case when j.dead_letter then 'dead' else 'failed' end,
        last_error = """
    + LAPSED_ERROR
    + """,
        errors = """
    + errors_appended(LAPSED_ERROR)
    + """,
        worker_id = null, lease_expires_at = null, finished_at = now(), updated_at = now()"""
)

FINAL_STATES = ("done", "failed", "dead", "cancelled")


def release_cte(rows: str, state: str, *, channel: bool) -> str:
    """The `released` CTE of every statement that makes jobs final: the rows of the CTE ``rows``
    (answering `id` and `has_dependents`) whose ``state`` expression is final and that some job
    waits on go to ``release_dependents`` (migration 022) in ONE call, which moves their waiting
    dependents. Rows without dependents call nothing. ``channel``: the function wakes the queues
    of the jobs it made ready (one NOTIFY each); without, it answers them (the settle owes them
    to the wake throttle). Reference it (select its `queues`) or it does not run."""
    wake = "%(channel)s::text" if channel else "null::text"
    return f"""released as (
    select {{schema}}.release_dependents(r.ids, r.states, {wake}) as queues
    from (
        select array_agg({rows}.id order by {rows}.id) as ids, array_agg(({state})::text order by {rows}.id) as states
        from {rows}
        where {rows}.has_dependents and {state} in ('done', 'failed', 'dead', 'cancelled')
    ) as r
    where r.ids is not null
)"""


# What every read of a whole job returns. A due 'delayed' or 'suspended' row is reported 'ready':
# the claim treats them alike once run_at has passed, and so should a person reading the row.
# `lease_lapsed`: a running row whose worker stopped renewing its lease, on the database's clock
# (not yet re-taken by a claim nor rescued).
JOB_COLUMNS = (
    """
    j.id::text as id, j.name, j.queue, j.tenant,
    """
    + REPORTED_STATE
    + """ as state,
    j.priority, j.payload, j.result, j.last_error, j.errors, j.progress, j.idempotency_key,
    j.attempt, j.max_attempts, j.dead_letter, j.claims, j.worker_id, j.lease_expires_at,
    j.run_at, j.created_at, j.started_at, j.finished_at, j.updated_at, j.flow_key, j.traceparent, j.handed_back,
    j.state = 'running' and j.lease_expires_at < now() as lease_lapsed
"""
)


def timed_rows() -> str:
    """The `timed` CTE: a batch's parallel arrays (``_insert_params``) as rows, each with its due
    time on this server's clock. Shared by INSERT_MANY and the outbox relay's ENQUEUE_STAGED, so the
    array parameters are named in one place."""
    return """with timed as (
    select t.id, t.name, t.queue, t.tenant, t.payload, t.key, t.priority, t.max_attempts, t.dead_letter,
           coalesce(t.run_at, now() + t.delay * interval '1 second') as due, t.flow_key, t.traceparent
    from unnest(
        %(ids)s::uuid[], %(names)s::text[], %(queues)s::text[], %(tenants)s::text[],
        %(payloads)s::text[], %(keys)s::text[], %(priorities)s::int[], %(max_attempts)s::int[],
        %(dead_letters)s::bool[], %(run_ats)s::timestamptz[], %(delays)s::float8[], %(flow_keys)s::text[],
        %(traceparents)s::text[]
    ) as t(id, name, queue, tenant, payload, key, priority, max_attempts, dead_letter, run_at, delay, flow_key,
           traceparent)
)"""


# One round trip for a whole batch. Rows arrive as parallel arrays; the unique partial index on
# live (name, tenant, key) turns a duplicate into "no row inserted" inside the caller's own
# transaction. The wake is a NOTIFY per distinct queue (and per kind: due now, or delayed, see
# WAKE_SWEEP), skipped when the server's notification queue is half full: a full queue makes
# COMMIT fail, and a missed wake costs only a poll.
INSERT_MANY = (
    "\n"
    + timed_rows()
    + """, inserted as (
    insert into {schema}.jobs (
        id, name, queue, tenant, state, priority, payload, idempotency_key,
        max_attempts, dead_letter, run_at, flow_key, traceparent
    )
    select id, name, queue, tenant,
           case when due > now() then 'delayed' else 'ready' end,
           priority, payload::jsonb, key, max_attempts, dead_letter, due, flow_key, traceparent
    from timed
    on conflict do nothing
    returning id, queue, state
), wake as (
    select pg_notify(%(channel)s, case when q.later then 'sweep:' || q.queue else q.queue end)
    from (select distinct queue, state = 'delayed' as later from inserted) as q
    where pg_notification_queue_usage() < 0.5
)
select inserted.id::text as id, (select count(*) from wake) as woken
from inserted
"""
)

# The commonest enqueue: one job, no idempotency key, due now. A plain VALUES insert with no ON
# CONFLICT (a keyless row cannot conflict: its id is a fresh uuid7), so PostgreSQL skips the
# speculative insertion an arbiter needs, about 30 us of backend time. Positional parameters, in
# this order: id, name, queue, tenant, priority, payload, max_attempts, dead_letter, channel. The
# id is the caller's, so nothing needs to come back; the one row answered is the wake's. Every
# parameter is cast to a built-in type: prepared without types, one would take a column's domain,
# and a session would keep that type's oid after the schema was dropped and migrated again.
INSERT_READY = """
with inserted as (
    insert into {schema}.jobs (id, name, queue, tenant, state, priority, payload, max_attempts, dead_letter, run_at)
    values (%s::uuid, %s::text, %s::text, %s::text, 'ready', %s::int, %s::jsonb, %s::int, %s::boolean, now())
    returning queue
)
select pg_notify(%s::text, inserted.queue)
from inserted
where pg_notification_queue_usage() < 0.5
"""

# INSERT_READY without its wake (the same first eight parameters): an enqueue of a queue already
# woken in the last few milliseconds, whose wake trails (``drivers/wake_throttle.py``).
INSERT_READY_QUIET = """
insert into {schema}.jobs (id, name, queue, tenant, state, priority, payload, max_attempts, dead_letter, run_at)
values (%s::uuid, %s::text, %s::text, %s::text, 'ready', %s::int, %s::jsonb, %s::int, %s::boolean, now())
"""

# One job, plain parameters: the common single enqueue without the cost of array parameters.
# Same semantics as INSERT_MANY (database clock, live-key conflict is "no row", conditional wake).
INSERT_ONE = """
with inserted as (
    insert into {schema}.jobs (
        id, name, queue, tenant, state, priority, payload, idempotency_key,
        max_attempts, dead_letter, run_at, flow_key, traceparent
    )
    select %(id)s::uuid, %(name)s, %(queue)s, %(tenant)s,
           case when t.due > now() then 'delayed' else 'ready' end,
           %(priority)s, %(payload)s::jsonb, %(key)s, %(max_attempts)s, %(dead_letter)s, t.due, %(flow_key)s::text,
           %(traceparent)s::text
    from (select coalesce(%(run_at)s::timestamptz, now() + %(delay)s::float8 * interval '1 second') as due) as t
    on conflict do nothing
    returning id, queue, state
), wake as (
    select pg_notify(%(channel)s, case when inserted.state = 'delayed' then 'sweep:' || inserted.queue
                                       else inserted.queue end)
    from inserted
    where pg_notification_queue_usage() < 0.5
)
select inserted.id::text as id, (select count(*) from wake) as woken
from inserted
"""

# A large batch with no keys and no delay streams in with COPY (run_at defaults to now(), the
# database clock); the wake follows in the same transaction, one NOTIFY per queue.
COPY_READY = """
copy {schema}.jobs (id, name, queue, tenant, state, priority, payload, max_attempts, dead_letter)
from stdin
"""

WAKE_QUEUES = """
select pg_notify(%(channel)s, q.queue)
from unnest(%(queues)s::text[]) as q(queue)
where pg_notification_queue_usage() < 0.5
"""

# Follow-up for the rows a batch did not insert: the live job holding each key.
LIVE_BY_KEYS = """
select j.id::text as id, j.name, coalesce(j.tenant, '') as tenant, j.idempotency_key
from {schema}.jobs as j
join unnest(%(names)s::text[], %(tenants)s::text[], %(keys)s::text[]) as k(name, tenant, key)
  on j.name = k.name and coalesce(j.tenant, '') = k.tenant and j.idempotency_key = k.key
where j.state in ('ready', 'delayed', 'running', 'suspended')
"""

# What every claim writes on the rows it takes: an attempt spent, the fence moved, the lease.
CLAIM_TAKES = """    set state = 'running', attempt = j.attempt + 1, claims = j.claims + 1,
        worker_id = %(worker_id)s,
        lease_expires_at = now() + %(visibility)s::float8 * interval '1 second',
        started_at = now(), updated_at = now()"""

# What every claim's writes answer, for claim_answer's rows.
CLAIM_RETURNING = """    returning j.id, j.name, j.queue, j.tenant, j.state, j.payload, j.attempt, j.max_attempts,
              j.claims, j.priority, j.created_at, j.run_at, j.last_error, j.traceparent, j.has_dependents,
              j.deps_when"""


# dependencies_of: a claimed job's dependencies (``ctx.dependencies``), in the order given at enqueue: one jsonb
# array read by the claim itself, for a job that has any (deps_when set), so a plain job pays
# nothing and a dependent no round trip. A dependency retention purged reads as state null.
def dependencies_of(job: str) -> str:
    """A jsonb array of the dependencies of the row ``job`` (an alias answering `id`)."""
    return (
        """(
    select jsonb_agg(jsonb_build_object(
               'id', d.parent_id::text, 'name', p.name, 'state', p.state, 'result', p.result,
               'last_error', p.last_error) order by d.position)
    from {schema}.job_deps as d
    left join {schema}.jobs as p on p.id = d.parent_id
    where d.child_id = """
        + job
        + """.id
)"""
    )


def claim_answer(*arms: str, next_due: bool = False, held: bool = False, released: bool = False) -> str:
    """A claim's answer, one shape for every claim statement: a row per job of its `claimed` CTE
    (kind 'claimed', with its dependencies when it has some: ``dependencies_of``), then of each CTE
    named in ``arms`` (kind = the CTE's name: 'buried', 'refused'); with ``next_due``, the
    `next_due` CTE's seconds (kind 'next'); with ``held``, how many candidates the `judged` CTE
    passed over (kind 'held', in the next_due column); with ``released``, a row (kind 'released')
    when the `released` CTE moved the dependents of the rows the claim made final."""
    rows = [
        "select 'claimed' as kind, id::text as id, name, queue, tenant, state, payload, attempt, max_attempts,\n"
        "       claims, priority, created_at, run_at, last_error, traceparent, null::float8 as next_due,\n"
        "       case when claimed.deps_when is null then null else "
        + dependencies_of("claimed")
        + " end as dependencies\nfrom claimed"
    ]
    for arm in arms:
        rows.append(
            f"select '{arm}', id::text, name, queue, tenant, state, payload, attempt, max_attempts,\n"
            f"       claims, priority, created_at, run_at, last_error, traceparent, null, null\nfrom {arm}"
        )
    blank = ", ".join(["null"] * 14)
    if next_due:
        rows.append(f"select 'next', {blank}, seconds, null\nfrom next_due\nwhere seconds is not null")
    if held:
        rows.append(
            f"select 'held', {blank}, count(*)::float8, null\nfrom judged\nwhere judged.verdict = 'held'\n"
            "having count(*) > 0"
        )
    if released:
        rows.append(f"select 'released', {blank}, cardinality(released.queues)::float8, null\nfrom released")
    return "\n" + "\nunion all\n".join(rows) + "\n"


# The claim: every wanted queue in ONE statement, each up to its own free slots. A paused queue
# (a row in queue_pauses) is dropped from `wanted`, so no arm (nor next_due) reads it; running
# jobs of it are untouched. Per queue, two arms, each locking with SKIP LOCKED so concurrent
# claimers never wait on each other:
#   lapsed  running rows whose lease passed (their worker died). Re-claimed first, spending an
#           attempt, unless the row is already on its final attempt: then this statement buries
#           it ('dead', or 'failed' without a dead-letter queue), appends the LeaseLapsed error
#           to its errors history, and reports it instead.
#   due     ready/delayed/suspended rows whose run_at passed, by priority, run_at, id (jobs_due_idx):
#           a suspended row is a run whose sleep ended or whose wait's deadline passed.
# Only job names this worker can run are taken: an unknown name waits for a worker that knows it.
# `counted` adds each buried row to the minute's dead (or failed) counter and each lease taken
# back to its lapsed counter: one upsert per (queue, name), in that order (see the module doc).
# The last arm answers how far away the next event is: a delayed or suspended job coming due
# (jobs_later_idx) or a running job's lease that could lapse (jobs_running_lease_idx), so a
# worker with free slots sleeps until then instead of polling for it.
CLAIM = (
    """
with wanted as (
    select w.queue, w.slots
    from unnest(%(queues)s::text[], %(slots)s::int[]) as w(queue, slots)
    where not exists (select 1 from {schema}.queue_pauses as p where p.queue = w.queue)
), lapsed as (
    select l.id, l.exhausted, wanted.queue,
           row_number() over (partition by wanted.queue order by l.lease_expires_at, l.id) as ord
    from wanted cross join lateral (
        select j.id, j.attempt >= j.max_attempts as exhausted, j.lease_expires_at
        from {schema}.jobs as j
        where j.state = 'running' and j.lease_expires_at < now()
          and j.queue = wanted.queue and j.name = any(%(names)s::text[])
        order by j.lease_expires_at, j.id
        limit wanted.slots
        for update skip locked
    ) as l
), due as (
    select d.id, wanted.queue,
           row_number() over (partition by wanted.queue order by d.priority desc, d.run_at, d.id) as ord
    from wanted cross join lateral (
        select j.id, j.priority, j.run_at
        from {schema}.jobs as j
        where j.state in ('ready', 'delayed', 'suspended') and j.run_at <= now()
          and j.queue = wanted.queue and j.name = any(%(names)s::text[])
        order by j.priority desc, j.run_at, j.id
        limit wanted.slots
        for update skip locked
    ) as d
), picked as (
    select c.id
    from (
        select u.id, u.queue, row_number() over (partition by u.queue order by u.arm, u.ord) as nth
        from (
            select id, queue, 0 as arm, ord from lapsed where not exhausted
            union all
            select id, queue, 1 as arm, ord from due
        ) as u
    ) as c
    join wanted on wanted.queue = c.queue
    where c.nth <= wanted.slots
), buried as (
    update {schema}.jobs as j
    """
    + BURY_LAPSED
    + """
    where j.id = any(array(select lapsed.id from lapsed where lapsed.exhausted))
    """
    + CLAIM_RETURNING
    + """
), """
    + release_cte("buried", "buried.state", channel=True)
    + """, claimed as (
    update {schema}.jobs as j
    """
    + CLAIM_TAKES
    + """
    where j.id = any(array(select picked.id from picked))  -- pkey lookups, whatever the plan guesses
    """
    + CLAIM_RETURNING
    + """
), counted as (
    insert into {schema}.counters as c (tier, bucket, queue, name, failed, dead, lapsed)
    select 'minute', date_trunc('minute', now()), e.queue, e.name,
           count(*) filter (where e.outcome = 'failed'),
           count(*) filter (where e.outcome = 'dead'),
           count(*) filter (where e.outcome = 'lapsed')
    from (
        select buried.queue, buried.name, buried.state as outcome from buried
        union all
        select claimed.queue, claimed.name, 'lapsed' from claimed
        join lapsed on lapsed.id = claimed.id and not lapsed.exhausted
    ) as e
    group by e.queue, e.name
    order by e.queue, e.name  -- the fixed lock order: no deadlock between two claimers or settlers
    on conflict (tier, bucket, queue, name) do update
    set failed = c.failed + excluded.failed, dead = c.dead + excluded.dead, lapsed = c.lapsed + excluded.lapsed
), next_due as (
    select extract(epoch from min(n.at) - now())::float8 as seconds
    from wanted cross join lateral (
        (select j.run_at as at
         from {schema}.jobs as j
         where j.state in ('delayed', 'suspended') and j.run_at > now() and j.queue = wanted.queue
           and j.name = any(%(names)s::text[])
         order by j.run_at
         limit 1)
        union all
        (select j.lease_expires_at
         from {schema}.jobs as j
         where j.state = 'running' and j.lease_expires_at > now() and j.queue = wanted.queue
           and j.name = any(%(names)s::text[])
         order by j.lease_expires_at
         limit 1)
    ) as n
)
"""
    + claim_answer("buried", next_due=True, released=True)
)

# The lean claim a busy worker runs while every claim comes back full: the due arm only, no
# lapsed-lease sweep, no next-due probe (the worker still runs the full CLAIM at least once a
# second), so it moves no counter. Paused queues are dropped as in CLAIM. Same output shape.
CLAIM_DUE = (
    """
with wanted as (
    select w.queue, w.slots
    from unnest(%(queues)s::text[], %(slots)s::int[]) as w(queue, slots)
    where not exists (select 1 from {schema}.queue_pauses as p where p.queue = w.queue)
), due as (
    select d.id
    from wanted cross join lateral (
        select j.id
        from {schema}.jobs as j
        where j.state in ('ready', 'delayed', 'suspended') and j.run_at <= now()
          and j.queue = wanted.queue and j.name = any(%(names)s::text[])
        order by j.priority desc, j.run_at, j.id
        limit wanted.slots
        for update skip locked
    ) as d
), claimed as (
    update {schema}.jobs as j
    """
    + CLAIM_TAKES
    + """
    where j.id = any(array(select due.id from due))  -- pkey lookups: a generic plan would guess a hash join
    """
    + CLAIM_RETURNING
    + """
)
"""
    + claim_answer()
)

# Renew the worker's registry row and every lease it holds, in ONE statement (idle or busy, a
# worker issues one of these per beat). Job rows not returned are no longer ours. A lapsed lease
# nobody re-claimed yet is renewed too: the fence (claims) proves it is still this run. The
# fence's state comes from the materialized `held`, as in SETTLE_MANY (see there): one primary-key
# lookup per lease, never a pass over jobs_running_lease_idx and the dead entries every finished
# run leaves in it until a vacuum.
HEARTBEAT = """
with held as materialized (
    select 'running'::text as fenced, h.id, h.claim
    from unnest(%(ids)s::uuid[], %(claims)s::int[]) as h(id, claim)
), registry as (
    update {schema}.workers
    set last_seen_at = now(), expires_at = now() + %(visibility)s * interval '1 second'
    where id = %(worker_id)s
    returning id
), renewed as (
    update {schema}.jobs as j
    set lease_expires_at = now() + %(visibility)s * interval '1 second'
    from held as h
    where j.id = h.id and j.claims = h.claim and j.worker_id = %(worker_id)s and j.state = h.fenced
    returning j.id
)
select 'job' as kind, id::text as id from renewed
union all
select 'worker', id from registry
"""

# Settle a batch of attempts in one statement, each fenced on its claim. Outcomes:
#   done         finished, result stored
#   retry        back to ready/delayed after `delay` seconds; the attempt stays spent
#   interrupted  handed back ready now, the attempt NOT spent (drain, shed); its queue is woken, so an
#                idle worker elsewhere takes it at once (a deploy's drain does not wait for a poll);
#                `handed_back` keeps when, by which worker, why (`reason`) and which attempt
#   dead/failed  finished for good
# An error (retry, dead, failed) becomes last_error (whole, with its traceback) and is appended to
# the errors history. A progress report the run made but had not written yet rides along (null
# keeps the stored one). With `release` (a worker under flow control), every settled row's queue
# is woken too: a finished run freed a slot some idle worker may be waiting for.
# Only LANDED rows are counted, in the minute bucket of their (queue, name);
# 'interrupted' counts nothing (it was no attempt).
# The fence's state ('running') comes from the materialized `s`, not a literal: with a literal a
# generic plan may read all of jobs_running_lease_idx (every running row, and the dead entries
# each finished run leaves there until a vacuum) and compare each with every settlement, and a
# plan made while few jobs ran stays with its connection (12 ms a settle at 2,000 running rows).
# From `s`, each settlement is one primary-key lookup, however many jobs run or ran.
SETTLE_MANY = (
    """
with s as materialized (
    select 'running'::text as fenced, t.id, t.worker_id, t.claim, t.outcome, t.result::jsonb as result,
           t.error::jsonb as error, t.delay, t.progress::jsonb as progress, t.reason
    from unnest(
        %(ids)s::uuid[], %(worker_ids)s::text[], %(claims)s::int[], %(outcomes)s::text[],
        %(results)s::text[], %(errors)s::text[], %(delays)s::float8[], %(progresses)s::text[],
        %(reasons)s::text[]
    ) as t(id, worker_id, claim, outcome, result, error, delay, progress, reason)
), settled as (
    update {schema}.jobs as j
    set state = case s.outcome
            when 'retry' then case when s.delay > 0 then 'delayed' else 'ready' end
            when 'interrupted' then 'ready'
            else s.outcome end,
        result = case when s.outcome = 'done' then s.result else j.result end,
        last_error = coalesce(s.error, j.last_error),
        errors = case when s.error is null then j.errors else """
    + errors_appended("s.error")
    + """ end,
        progress = coalesce(s.progress, j.progress),
        handed_back = case when s.outcome = 'interrupted'
                           then jsonb_build_object('at', now(), 'worker', s.worker_id, 'reason', s.reason,
                                                   'attempt', j.attempt)
                           else j.handed_back end,
        attempt = case when s.outcome = 'interrupted' then greatest(j.attempt - 1, 0) else j.attempt end,
        run_at = case when s.outcome in ('retry', 'interrupted')
                      then now() + s.delay * interval '1 second' else j.run_at end,
        finished_at = case when s.outcome in ('done', 'dead', 'failed') then now() else null end,
        worker_id = null, lease_expires_at = null, updated_at = now()
    from s
    where j.id = s.id and j.state = s.fenced and j.worker_id = s.worker_id and j.claims = s.claim
    returning j.id, j.queue, j.name, s.outcome, j.has_dependents
), """
    + release_cte("settled", "settled.outcome", channel=False)
    + """, counted as (
    insert into {schema}.counters as c (tier, bucket, queue, name, completed, retried, failed, dead)
    select 'minute', date_trunc('minute', now()), settled.queue, settled.name,
           count(*) filter (where settled.outcome = 'done'),
           count(*) filter (where settled.outcome = 'retry'),
           count(*) filter (where settled.outcome = 'failed'),
           count(*) filter (where settled.outcome = 'dead')
    from settled
    where settled.outcome <> 'interrupted'
    group by settled.queue, settled.name
    order by settled.queue, settled.name  -- the fixed lock order: no deadlock between two settlers
    on conflict (tier, bucket, queue, name) do update
    set completed = c.completed + excluded.completed, retried = c.retried + excluded.retried,
        failed = c.failed + excluded.failed, dead = c.dead + excluded.dead
), handed as (
    select settled.queue from settled where settled.outcome = 'interrupted' or %(release)s::bool
), """
    + wake_cte("handed")
    + """, told as (
    -- app.wait's wake-up (workhorse.steps.results): the ids of the runs that finished, on the settled
    -- channel (never the workers' channel); '' when too many for one payload (waiters re-read).
    -- Skipped when the server's notification queue is half full: a waiter re-reads on its poll.
    select pg_notify(%(settled_channel)s,
                     case when count(*) <= 200 then string_agg(settled.id::text, ',') else '' end)
    from settled
    where settled.outcome in ('done', 'dead', 'failed') and pg_notification_queue_usage() < 0.5
    having count(*) > 0
)
select settled.id::text as id, (select count(*) from wake) as woken, (select count(*) from told) as told,
       (select released.queues from released) as released
from settled
"""
)

# What a requeue writes (one job, from a step, or in bulk): a fresh run — attempts reset, due now,
# result and progress cleared. The key, last_error, the errors history and the steps stay.
REQUEUED = (
    "state = 'ready', attempt = 0, run_at = now(), result = null, finished_at = null, "
    "worker_id = null, lease_expires_at = null, progress = null, updated_at = now()"
)

# One finished job made a fresh run (the head of REQUEUE and REQUEUE_FROM_STEP).
REQUEUE_FINISHED = (
    """
    update {schema}.jobs
    set """
    + REQUEUED
    + """
    where id = %(id)s::uuid and state in ('done', 'failed', 'dead', 'cancelled')"""
)

GET = "select " + JOB_COLUMNS + " from {schema}.jobs as j where j.id = %(id)s::uuid"

# Operator verbs. Each is one statement guarded by the states it applies to; a miss is read
# back with GET to tell "not found" from "wrong state". The bulk forms are in ``admin``.
CANCEL = (
    """
with moved as (
    update {schema}.jobs
    set state = 'cancelled', worker_id = null, lease_expires_at = null,
        finished_at = now(), updated_at = now()
    where id = %(id)s::uuid and state in ('pending', 'ready', 'delayed', 'running', 'suspended')
    returning id, queue, has_dependents
), """
    + release_cte("moved", "'cancelled'", channel=True)
    + ", "
    + wake_cte(prefix=WAKE_BEAT)
    + """
select moved.id::text as id, (select count(*) from wake) as woken,
       (select cardinality(released.queues) from released) as released
from moved
"""
)

# Requeue a finished job as a fresh run: attempts reset, progress cleared, key kept; last_error and
# the errors history stay (they are the job's history). The live-key index refuses it (unique
# violation) when another live job already holds the key. The queue's idle workers are woken.
REQUEUE = (
    """
with moved as ("""
    + REQUEUE_FINISHED
    + """
    returning id, queue
), """
    + wake_cte()
    + """
select moved.id::text as id, (select count(*) from wake) as woken
from moved
"""
)

# Requeue from a named step: drop that step and every later one (by position) and re-queue the
# job, in ONE statement. `moved` runs only for a finished job that has the step, and the delete
# joins `moved`, so a refused requeue (live job, unknown step, key held) deletes nothing.
REQUEUE_FROM_STEP = (
    """
with target as (
    select s.seq from {schema}.steps as s where s.job_id = %(id)s::uuid and s.name = %(step)s
), moved as ("""
    + REQUEUE_FINISHED
    + """
      and exists (select 1 from target)
    returning id, queue
), dropped as (
    delete from {schema}.steps as s
    using target, moved
    where s.job_id = moved.id and s.seq >= target.seq
    returning s.name
), """
    + wake_cte()
    + """
select moved.id::text as id, (select count(*) from dropped) as dropped, (select count(*) from wake) as woken
from moved
"""
)

# least(): promoting an overdue ready job must not move it behind its peers. Wakes the queue.
PROMOTE = (
    """
with moved as (
    update {schema}.jobs
    set state = 'ready', run_at = least(run_at, now()), updated_at = now()
    where id = %(id)s::uuid and state in ('ready', 'delayed')
    returning id, queue
), """
    + wake_cte()
    + """
select moved.id::text as id, (select count(*) from wake) as woken
from moved
"""
)

# A removed job that was not final yet releases its waiting dependents as a cancelled one would
# (a final one released them when it ended): none is left pending on a job that is gone.
REMOVED_RELEASE = "case when {rows}.state in ('done', 'failed', 'dead', 'cancelled') then 'gone' else 'cancelled' end"

REMOVE = (
    """
with removed as (
    delete from {schema}.jobs
    where id = %(id)s::uuid and state <> 'running'
    returning id, state, has_dependents
), """
    + release_cte("removed", REMOVED_RELEASE.format(rows="removed"), channel=True)
    + """
select removed.id::text as id, (select count(*) from released) as released
from removed
"""
)

NOTIFY_CHANNEL_SUFFIX = "_jobs"
SETTLED_CHANNEL_SUFFIX = "_settled"  # SETTLE_MANY's `told`: the ids of runs that finished (app.wait)
