"""Webhooks (``workhorse.webhooks``): endpoints, the delivery ledger, and the one statement that
records an attempt and moves its endpoint's failure count in the same transaction.

Only ``ENDPOINT_SECRETS`` and ``ENDPOINT_INSERT``/``ENDPOINT_ROTATE`` (which answer the new
secret to the caller who made it) read the secret columns; every listing names its columns
without them, so no operator read can print a secret by accident.
"""

# The columns an operator may see (never a secret).
_PUBLIC = """e.id::text as id, e.tenant, e.url, e.events, e.disable_after, e.enabled, e.disabled_reason,
       e.disabled_at, e.consecutive_failures, e.created_at, e.updated_at,
       (e.previous_secret is not null and e.previous_expires_at > now()) as rotating,
       e.previous_expires_at"""

ENDPOINT_INSERT = f"""
insert into {{schema}}.webhook_endpoints as e (id, tenant, url, events, secret, disable_after)
values (%(id)s::uuid, %(tenant)s::text, %(url)s::text, %(events)s::text[], %(secret)s::text, %(disable_after)s::int)
returning {_PUBLIC}
"""

ENDPOINT_GET = f"""
select {_PUBLIC}
from {{schema}}.webhook_endpoints as e
where e.id = %(id)s::uuid
"""

# What a delivery signs with: the secret, and the previous one while its grace period runs.
ENDPOINT_SECRETS = """
select e.id::text as id, e.tenant, e.url, e.events, e.enabled, e.disabled_reason, e.secret,
       case when e.previous_expires_at > now() then e.previous_secret end as previous_secret
from {schema}.webhook_endpoints as e
where e.id = %(id)s::uuid
"""

# Newest first is no use for a handful of endpoints: by tenant, then id, keyset-paged on both.
ENDPOINT_LIST = f"""
select {_PUBLIC}
from {{schema}}.webhook_endpoints as e
where (%(tenant)s::text is null or e.tenant = %(tenant)s::text)
  and (%(after)s::uuid is null or e.id > %(after)s::uuid)
order by e.id
limit %(limit)s
"""

# A new secret; the old one keeps signing (beside the new) for `grace` seconds.
ENDPOINT_ROTATE = f"""
update {{schema}}.webhook_endpoints as e
set previous_secret = e.secret,
    previous_expires_at = now() + %(grace)s::float8 * interval '1 second',
    secret = %(secret)s::text,
    updated_at = now()
where e.id = %(id)s::uuid
returning {_PUBLIC}
"""

# Re-enabling is an operator's act: the failure count starts again from zero.
ENDPOINT_ENABLE = f"""
update {{schema}}.webhook_endpoints as e
set enabled = true, disabled_reason = null, disabled_at = null, consecutive_failures = 0, updated_at = now()
where e.id = %(id)s::uuid
returning {_PUBLIC}
"""

ENDPOINT_DISABLE = f"""
update {{schema}}.webhook_endpoints as e
set enabled = false,
    disabled_reason = case when e.enabled then %(reason)s::text else e.disabled_reason end,
    disabled_at = case when e.enabled then now() else e.disabled_at end,
    updated_at = now()
where e.id = %(id)s::uuid
returning {_PUBLIC}
"""

# One attempt, recorded before the attempt settles, fenced on the run: the row lands only while
# the job is still `running` under this worker at this attempt (a run that lost its lease writes
# nothing). In the same statement the endpoint's consecutive-failure count moves (a delivery
# resets it; a failure that `counts` adds one) and the endpoint is disabled when the count
# reaches its threshold, or at once when `gone` (a 410). The endpoint row is locked first, so
# two deliveries to one endpoint count one after the other.
RECORD_ATTEMPT = """
with fence as (
    select j.id
    from {schema}.jobs as j
    where j.id = %(job_id)s::uuid and j.state = 'running'
      and j.worker_id = %(worker_id)s::text and j.attempt = %(attempt)s::int
), before as (
    select e.id, e.enabled, e.consecutive_failures,
           coalesce(e.disable_after, %(disable_after)s::int) as threshold
    from {schema}.webhook_endpoints as e
    where e.id = %(endpoint_id)s::uuid and exists (select 1 from fence)
    for update
), ledger as (
    insert into {schema}.webhook_deliveries
        (endpoint_id, job_id, message_id, event, attempt, status, response_code, latency_ms,
         response_excerpt, error)
    select before.id, %(job_id)s::uuid, %(message_id)s::text, %(event)s::text, %(attempt)s::int,
           %(status)s::text, %(response_code)s::int, %(latency_ms)s::float8, %(excerpt)s::text, %(error)s::text
    from before
    returning id
), counted as (
    select before.id, before.enabled,
           case when %(success)s::boolean then 0
                when %(counts)s::boolean then before.consecutive_failures + 1
                else before.consecutive_failures end as failures,
           before.threshold
    from before
), verdict as (
    select counted.id, counted.failures,
           counted.enabled and (%(gone)s::boolean or counted.failures >= counted.threshold) as disable_now
    from counted
), moved as (
    update {schema}.webhook_endpoints as e
    set consecutive_failures = verdict.failures,
        enabled = e.enabled and not verdict.disable_now,
        disabled_reason = case when verdict.disable_now then
            case when %(gone)s::boolean then 'the receiver answered 410 Gone'
                 else verdict.failures || ' consecutive failed attempts' end
            else e.disabled_reason end,
        disabled_at = case when verdict.disable_now then now() else e.disabled_at end,
        updated_at = now()
    from verdict
    where e.id = verdict.id
    returning e.id
)
select (select count(*) from ledger) as recorded,
       (select count(*) from moved) as moved,
       coalesce((select verdict.disable_now from verdict), false) as disabled_now,
       (select verdict.failures from verdict) as failures
"""

# One page of an endpoint's ledger, newest first: keyset on the ledger's id.
DELIVERIES_PAGE = """
select d.id, d.endpoint_id::text as endpoint_id, d.job_id::text as job_id, d.message_id, d.event,
       d.attempt, d.status, d.response_code, d.latency_ms, d.response_excerpt, d.error, d.created_at
from {schema}.webhook_deliveries as d
where d.endpoint_id = %(endpoint_id)s::uuid
  and (%(after)s::bigint is null or d.id < %(after)s::bigint)
order by d.id desc
limit %(limit)s
"""
