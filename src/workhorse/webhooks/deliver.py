"""The delivery job: one event to one endpoint, one attempt per run.

Registered by ``App(webhooks=WebhookPolicy(...))`` under the reserved name
``workhorse.webhooks.deliver`` on the policy's queue, so any worker process that imports the app
serves it. Its payload names the endpoint and carries the message id and the exact body bytes
(as text): never the secret, which the attempt reads from the endpoint row when it signs and
keeps in a local only. It takes no steps: a step's output is stored, and the endpoint holds the
secret.

An attempt, in order: read the endpoint (disabled: a ``skipped`` row, and the job ends
dead-lettered; re-enable and ``workhorse requeue`` it); check the URL and resolve and check its
address (refused: a ``refused`` row that counts as a failure); if the worker is draining, hand
the job back unspent before any socket opens; POST; record the answer in the ledger (fenced on
this run, moving the endpoint's failure count and disabling it at the threshold, in one
statement) and only then settle: 2xx returns, 410 and a disable end the job, 429/503 with a
``Retry-After`` retry at that time (clamped by ``retry.max_delay``, spread up to 10% later),
anything else raises ``WebhookDeliveryError`` for the job's backoff. A cancelled attempt (its
deadline, a lost lease, a drain's cut-off) records nothing.
"""

from __future__ import annotations

import time
from typing import Any

import workhorse.webhooks.queries as sql
from workhorse.context import JobContext
from workhorse.errors import ConfigurationError, LeaseLostError, RetryAfter, TerminalError
from workhorse.webhooks import store
from workhorse.webhooks.errors import WebhookDeliveryError, WebhookError
from workhorse.webhooks.guard import check_url, resolve
from workhorse.webhooks.policy import DELIVERY_JOB, WebhookPolicy
from workhorse.webhooks.ports import WebhookApp
from workhorse.webhooks.signing import sign
from workhorse.webhooks.wire import Answer, post, spread

JOB_TIMEOUT_MARGIN = 30.0  # the job's own deadline past the request's: a backstop for the ledger write


def install(app: Any, policy: object) -> WebhookPolicy:
    """Screen ``App(webhooks=...)`` and declare the delivery job on the app (a ``workhorse.App``)."""
    if not isinstance(policy, WebhookPolicy):
        raise ConfigurationError(
            cause=f"webhooks expected a workhorse.webhooks.WebhookPolicy or None, got {policy!r}",
            fix="App(webhooks=WebhookPolicy())   # from workhorse.webhooks import WebhookPolicy",
        )
    declare(app, policy)
    return policy


def declare(app: Any, policy: WebhookPolicy) -> None:
    async def deliver(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        return await attempt(app, policy, ctx, payload)

    app.job(
        name=DELIVERY_JOB,
        queue=policy.queue,
        tenant=_tenant_of,
        retry=policy.retry,
        timeout=policy.timeout + JOB_TIMEOUT_MARGIN,
    )(deliver)


def _tenant_of(payload: Any) -> str:
    return str(payload["tenant"])


async def attempt(app: WebhookApp, policy: WebhookPolicy, ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    endpoint_id = str(payload["endpoint_id"])
    row = await store.secrets_of(app, endpoint_id)
    if row is None:
        raise TerminalError(f"webhook endpoint {endpoint_id} no longer exists")
    ledger = _Ledger(app, policy, ctx, payload)
    if not row["enabled"]:
        why = row["disabled_reason"] or "disabled"
        await ledger.record("skipped", error=f"the endpoint is disabled ({why}); no request was made", counts=False)
        raise TerminalError(
            f"webhook endpoint {endpoint_id} is disabled ({why}): re-enable it (workhorse webhooks enable "
            f"{endpoint_id}), then requeue this job"
        )
    try:
        target = check_url(row["url"], policy)
        addresses = await resolve(target, policy)
    except WebhookError as refused:
        disabled = await ledger.record(
            "failed" if refused.code == "WEBHOOK_DNS_FAILED" else "refused",
            error=f"{refused.code}: {refused.cause}",
            counts=True,
        )
        if refused.code == "WEBHOOK_DNS_FAILED" and not disabled:
            raise  # a name that does not resolve may resolve later: the job's backoff
        raise TerminalError(f"{refused.code}: {refused.cause}") from None
    if ctx.draining:
        ctx.hand_back()  # nothing is on the wire yet: the next worker sends it, attempt unspent
    secrets_ = [row["secret"], *([row["previous_secret"]] if row["previous_secret"] else [])]
    body = str(payload["body"]).encode()
    headers = sign(secrets_, str(payload["message_id"]), int(time.time()), body)  # clock-ok: the wire's timestamp
    del secrets_, row
    answer = await post(target, addresses, headers, body, policy.timeout)
    disabled = await ledger.record(
        answer.status,
        response_code=answer.response_code,
        latency_ms=answer.latency_ms,
        excerpt=answer.excerpt,
        error=answer.error,
        counts=answer.status != "delivered",
    )
    if answer.status == "delivered":
        return {"endpoint_id": endpoint_id, "message_id": payload["message_id"], "status": answer.response_code}
    if disabled or answer.status == "gone":  # gone: even if an operator disabled it meanwhile
        raise TerminalError(f"webhook endpoint {endpoint_id} is disabled: {disabled or 'the receiver answered 410'}")
    if answer.retry_after is not None:
        raise RetryAfter(spread(answer.retry_after, policy.retry.max_delay), answer.error or "throttled")
    raise _failed(endpoint_id, answer)


def _failed(endpoint_id: str, answer: Answer) -> WebhookDeliveryError:
    return WebhookDeliveryError(
        cause=f"delivery to endpoint {endpoint_id} failed: {answer.error}",
        fix=f"workhorse webhooks deliveries {endpoint_id}   # every attempt, its status and the answer's excerpt",
    )


class _Ledger:
    """Writes this attempt's one ledger row (fenced on the run) and answers why the endpoint was
    disabled by it, if it was (empty: it was not)."""

    def __init__(self, app: WebhookApp, policy: WebhookPolicy, ctx: JobContext, payload: dict[str, Any]) -> None:
        self._app = app
        self._ctx = ctx
        self._base = {
            "job_id": ctx.id,
            "worker_id": ctx.worker_id,
            "attempt": ctx.attempt,
            "endpoint_id": str(payload["endpoint_id"]),
            "message_id": str(payload["message_id"]),
            "event": str(payload["event"]),
            "disable_after": policy.disable_after,
        }

    async def record(
        self,
        status: str,
        *,
        counts: bool,
        response_code: int | None = None,
        latency_ms: float | None = None,
        excerpt: str | None = None,
        error: str | None = None,
    ) -> str:
        params = {
            **self._base,
            "status": status,
            "response_code": response_code,
            "latency_ms": latency_ms,
            "excerpt": excerpt,
            "error": error,
            "success": status == "delivered",
            "gone": status == "gone",
            "counts": counts,
        }
        row = (await store.fetch(self._app, sql.RECORD_ATTEMPT, params))[0]
        if not row["recorded"]:
            raise LeaseLostError(self._ctx.name, self._ctx.id)  # the run is not ours: write nothing more
        if not row["disabled_now"]:
            return ""
        if status == "gone":
            return "the receiver answered 410 Gone"
        return f"{row['failures']} consecutive failed attempts"
