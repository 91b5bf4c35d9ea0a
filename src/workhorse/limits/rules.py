"""Flow control as declared: ``Concurrency``, ``Limits`` and ``Rate``, screened at construction,
and the ``FlowRules`` a worker hands its driver's claim.

Every cap is fleet-wide. It is enforced where jobs are claimed, by the statement that claims them,
never by a counter in one process: a job over any cap is simply not taken (it stays ``ready``, no
attempt spent, no ``last_error``), so nothing has to be handed back. What each cap counts:

* ``concurrency=N`` on ``@app.job``: running runs of that job name.
* ``Concurrency(limit, key=fn)``: running runs of that job name per key; the key is
  ``fn(payload)``, evaluated at enqueue and stored with the row. ``when_busy="fail"`` settles a
  run whose key is at its cap ``failed`` with ``JOB_KEY_BUSY`` instead of leaving it ready.
* ``Limits(per_tenant=)``: running runs per tenant (jobs declared ``tenant="none"`` have no
  tenant and are not counted); ``per_queue=``: per queue (an int for every queue, or a dict by
  queue name); ``total=``: every running run of the app.
* ``Limits(rate_per_tenant=Rate(n, per=))``: at most ``n`` runs of one tenant started in any
  window of length ``per`` (sliding, so a boundary never allows ``2n``).

A run holds its slot as long as it holds its lease: the heartbeat that renews the lease renews
the slot, and a lease that lapses (the holder was killed or frozen) frees it. Zero is a hard
stop: nothing under that cap starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError
from workhorse.storable import flaw
from workhorse.types import KEY_SEPARATOR, FlowRules, FlowUsage, Job

WhenBusy = Literal["wait", "fail"]
MAX_FLOW_KEY_LENGTH = 200


def _count(value: Any, what: str, fix: str) -> int:
    """A cap: a whole number, zero or more. Refuses bools, floats (even 2.0), NaN, infinities."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(cause=f"{what} expected a whole number of 0 or more, got {value!r}", fix=fix)
    return value


@dataclass(frozen=True, init=False)
class Rate:
    """At most ``n`` starts in any interval of length ``per`` (a duration: ``"1s"``, ``60``)."""

    n: int
    per: float

    def __init__(self, n: int, per: Duration = 1.0) -> None:
        object.__setattr__(self, "n", _count(n, "Rate(n)", "Rate(10, per='1s')"))
        seconds = to_seconds(per, what="Rate(per)", allow_zero=False)
        if seconds < 0.001:
            raise ConfigurationError(
                cause=f"Rate(per) expected a window of at least 1ms, got {per!r}", fix="Rate(10, per='1s')"
            )
        object.__setattr__(self, "per", seconds)


@dataclass(frozen=True, init=False)
class Concurrency:
    """A cap on running runs of one job: ``limit`` across the fleet, or per key with ``key=``."""

    limit: int
    key: Callable[[Any], str] | None
    when_busy: WhenBusy

    def __init__(self, limit: int, *, key: Callable[[Any], str] | None = None, when_busy: WhenBusy = "wait") -> None:
        object.__setattr__(self, "limit", _count(limit, "Concurrency(limit)", "Concurrency(2)"))
        if key is not None and not callable(key):
            raise ConfigurationError(
                cause=f"Concurrency(key=) expected a function payload -> str, got {key!r}",
                fix="Concurrency(1, key=lambda p: p['account_id'])",
            )
        if when_busy not in ("wait", "fail"):
            raise ConfigurationError(
                cause=f"Concurrency(when_busy=) expected 'wait' or 'fail', got {when_busy!r}",
                fix="Concurrency(1, key=lambda p: p['account_id'], when_busy='wait')",
            )
        if when_busy == "fail" and key is None:
            raise ConfigurationError(
                cause="Concurrency(when_busy='fail') needs key=: a plain cap leaves runs ready until a slot frees",
                fix="Concurrency(1, key=lambda p: p['account_id'], when_busy='fail')",
            )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "when_busy", when_busy)

    @classmethod
    def of(cls, value: Any, job: str) -> Concurrency | None:
        """``@app.job(concurrency=)`` read: None, a whole number, or a Concurrency."""
        if value is None or isinstance(value, Concurrency):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(
                cause=f"job {job!r}: concurrency expected a whole number or a workhorse.Concurrency, got {value!r}",
                fix="@app.job(concurrency=2) or concurrency=Concurrency(1, key=lambda p: p['account_id'])",
            )
        return cls(_count(value, f"job {job!r}: concurrency", "@app.job(concurrency=2)"))

    def key_for(self, payload: Any, job: str) -> str | None:
        """The key one enqueue stores, checked: a non-empty string of at most 200 characters."""
        if self.key is None:
            return None
        fix = "return a non-empty string of at most 200 characters, e.g. key=lambda p: str(p['account_id'])"
        try:
            value = self.key(payload)
        except Exception as error:
            raise ConfigurationError(
                cause=f"job {job!r}: its concurrency key function raised {type(error).__name__}: {error}", fix=fix
            ) from error
        if not isinstance(value, str) or not value or len(value) > MAX_FLOW_KEY_LENGTH or flaw(value):
            raise ConfigurationError(
                cause=f"job {job!r}: its concurrency key function answered {value!r}; a key must be a non-empty "
                f"string of at most {MAX_FLOW_KEY_LENGTH} characters that PostgreSQL can store (no NUL character, "
                "no lone surrogate)",
                fix=fix,
            )
        return value


@dataclass(frozen=True, init=False)
class Limits:
    """App-wide caps, each fleet-wide; None leaves that dimension unlimited."""

    per_tenant: int | None
    per_queue: int | Mapping[str, int] | None
    total: int | None
    rate_per_tenant: Rate | None

    def __init__(
        self,
        *,
        per_tenant: int | None = None,
        per_queue: int | Mapping[str, int] | None = None,
        total: int | None = None,
        rate_per_tenant: Rate | None = None,
    ) -> None:
        if per_tenant is not None:
            _count(per_tenant, "Limits(per_tenant)", "Limits(per_tenant=5)")
        if total is not None:
            _count(total, "Limits(total)", "Limits(total=100)")
        if isinstance(per_queue, Mapping):
            for queue, cap in per_queue.items():
                if not isinstance(queue, str) or not queue:
                    raise ConfigurationError(
                        cause=f"Limits(per_queue) keys are queue names, got {queue!r}",
                        fix="Limits(per_queue={'emails': 20})",
                    )
                _count(cap, f"Limits(per_queue[{queue!r}])", "Limits(per_queue={'emails': 20})")
            per_queue = dict(per_queue)
        elif per_queue is not None:
            _count(per_queue, "Limits(per_queue)", "Limits(per_queue=20) or per_queue={'emails': 20}")
        if rate_per_tenant is not None and not isinstance(rate_per_tenant, Rate):
            raise ConfigurationError(
                cause=f"Limits(rate_per_tenant) expected a workhorse.Rate, got {rate_per_tenant!r}",
                fix="Limits(rate_per_tenant=Rate(10, per='1s'))",
            )
        object.__setattr__(self, "per_tenant", per_tenant)
        object.__setattr__(self, "per_queue", per_queue)
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "rate_per_tenant", rate_per_tenant)

    @property
    def empty(self) -> bool:
        return (
            self.per_tenant is None and self.per_queue is None and self.total is None and self.rate_per_tenant is None
        )


def rules_for(limits: Limits | None, jobs: Mapping[str, Concurrency | None]) -> FlowRules | None:
    """What a worker's claim must enforce, from the app's limits and its jobs' declarations
    (name -> its ``concurrency``). None when nothing is capped: the worker claims as ever."""
    names = {name: c.limit for name, c in jobs.items() if c is not None and c.key is None}
    keyed = {name: (c.limit, c.when_busy == "fail") for name, c in jobs.items() if c is not None and c.key}
    limits = limits or Limits()
    if not names and not keyed and limits.empty:
        return None
    per_queue = limits.per_queue
    rate = limits.rate_per_tenant
    return FlowRules(
        names=names,
        keyed=keyed,
        per_tenant=limits.per_tenant,
        per_queue=dict(per_queue) if isinstance(per_queue, Mapping) else {},
        per_queue_default=per_queue if isinstance(per_queue, int) else None,
        total=limits.total,
        rate=None if rate is None else (rate.n, rate.per),
    )


def why_held(rules: FlowRules, usage: FlowUsage, job: Job) -> list[str]:
    """Why a due ready job is not starting, one line per full cap it counts toward (empty: none
    holds it). ``workhorse show`` prints them."""
    held = usage.running
    out: list[str] = []

    def check(cap: int | None, count: int, text: str) -> None:
        if cap is not None and count >= cap:
            out.append(text + (" (a cap of 0: a hard stop)" if cap == 0 else ""))

    cap = rules.names.get(job.name)
    check(cap, held.get(("name", job.name), 0), f"{held.get(('name', job.name), 0)} of {cap} runs of {job.name} "
          f"are running (concurrency={cap})")  # fmt: skip
    keyed = rules.keyed.get(job.name)
    if keyed is not None and job.flow_key is not None:
        n = held.get(("key", job.name + KEY_SEPARATOR + job.flow_key), 0)
        check(
            keyed[0],
            n,
            f"{n} of {keyed[0]} runs of key {job.flow_key!r} are running (Concurrency({keyed[0]}, key=...))",
        )
    if job.tenant is not None:
        n = held.get(("tenant", job.tenant), 0)
        check(
            rules.per_tenant,
            n,
            f"tenant {job.tenant!r} runs {n} of {rules.per_tenant} (Limits(per_tenant={rules.per_tenant}))",
        )
        if rules.rate is not None:
            limit, per = rules.rate
            started = usage.starts.get(job.tenant, 0)
            check(limit, started, f"tenant {job.tenant!r} started {started} runs in the last {per:g}s "
                  f"(Limits(rate_per_tenant=Rate({limit}, per={per:g})))")  # fmt: skip
    queue_cap = rules.queue_cap(job.queue)
    n = held.get(("queue", job.queue), 0)
    check(queue_cap, n, f"queue {job.queue!r} runs {n} of {queue_cap} (Limits(per_queue))")
    n = held.get(("total", ""), 0)
    check(rules.total, n, f"{n} of {rules.total} runs of the app are running (Limits(total={rules.total}))")
    return out
