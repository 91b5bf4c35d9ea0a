"""``WebhookPolicy``: what an app allows its deliveries (screened at ``App(webhooks=...)``), and
the check that a request's timeout stays inside the worker's drain budget."""

from __future__ import annotations

from dataclasses import dataclass

from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError
from workhorse.retry import Retry

DELIVERY_JOB = "workhorse.webhooks.deliver"  # the delivery job's reserved name
DRAIN_MARGIN = 2.0  # seconds a drain keeps after a request's timeout: the ledger write and the settle


@dataclass(frozen=True, init=False)
class WebhookPolicy:
    """How this app delivers webhooks.

    ``allow_private``: deliver to loopback, private, link-local and other non-public addresses
    (tests on 127.0.0.1; never in production). ``allow_http``: plain ``http://`` URLs too.
    ``disable_after``: consecutive failed attempts that disable an endpoint (``add_endpoint(...,
    disable_after=N)`` overrides it per endpoint). ``timeout``: the name's resolution, then one
    request to the last byte read; it must stay below the worker's ``drain_timeout`` by 2 s.
    ``queue`` and ``retry``: where the delivery jobs run, and how often each is tried.
    """

    allow_private: bool
    allow_http: bool
    disable_after: int
    timeout: float
    queue: str
    retry: Retry

    def __init__(
        self,
        allow_private: bool = False,
        allow_http: bool = False,
        disable_after: int = 10,
        timeout: Duration = "10s",
        *,
        queue: str = "webhooks",
        retry: Retry | None = None,
    ) -> None:
        for name, value in (("allow_private", allow_private), ("allow_http", allow_http)):
            if not isinstance(value, bool):
                raise ConfigurationError(
                    cause=f"WebhookPolicy.{name} expected True or False, got {value!r}",
                    fix=f"WebhookPolicy({name}=False)",
                )
        object.__setattr__(self, "allow_private", allow_private)
        object.__setattr__(self, "allow_http", allow_http)
        object.__setattr__(self, "disable_after", check_disable_after(disable_after, "WebhookPolicy.disable_after"))
        object.__setattr__(self, "timeout", to_seconds(timeout, what="WebhookPolicy.timeout", allow_zero=False))
        if not isinstance(queue, str) or not queue or len(queue) > 200:
            raise ConfigurationError(
                cause=f"WebhookPolicy.queue expected a queue name (1 to 200 characters), got {queue!r}",
                fix="WebhookPolicy(queue='webhooks')",
            )
        object.__setattr__(self, "queue", queue)
        if retry is not None and not isinstance(retry, Retry):
            raise ConfigurationError(
                cause=f"WebhookPolicy.retry expected a workhorse.Retry, got {retry!r}",
                fix="WebhookPolicy(retry=Retry(attempts=8, base='30s', max_delay='1h'))",
            )
        object.__setattr__(self, "retry", retry or Retry(attempts=8, base="30s", max_delay="1h"))


def check_disable_after(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise ConfigurationError(
            cause=f"{what} expected a whole number of failed attempts from 1, got {value!r}",
            fix="disable_after=10",
        )
    return value


def check_drain(policy: WebhookPolicy, drain_timeout: float, queues: list[str]) -> None:
    """Refuse a worker whose drain could cut off a delivery's request: a POST on the wire when
    SIGTERM lands must be able to finish (or time out) and be recorded before the cut-off."""
    if policy.queue not in queues or policy.timeout + DRAIN_MARGIN <= drain_timeout:
        return
    raise ConfigurationError(
        code="WEBHOOK_TIMEOUT_OVER_DRAIN",
        cause=f"WebhookPolicy(timeout={policy.timeout:g}s) plus {DRAIN_MARGIN:g}s to record the attempt does not "
        f"fit in this worker's drain_timeout of {drain_timeout:g}s: a drain would tear down a POST already on "
        "the wire, and the receiver would get the event again from the next worker",
        fix=f"lower WebhookPolicy(timeout=) below {max(drain_timeout - DRAIN_MARGIN, 0):g}s, or raise "
        f"--drain-timeout to {policy.timeout + DRAIN_MARGIN:g}s or more",
    )
