"""Flow control on the memory driver: the claim PostgreSQL makes with FLOW_CLAIM, under the
driver's one lock instead of FLOW_CLAIM's advisory lock, with the same caps counted the same way
(that module's docstring has the rules; the contract suite holds both drivers to them).

A run holds a slot of every cap it counts toward while its row is 'running' with a lease that has
not lapsed, so a heartbeat renews its slots and a killed holder's slots free when its lease lapses.
A claim frees such a lapsed slot by taking the row (re-taken, or buried on its final attempt) or,
when it may not run it, by moving its claim counter (revoked): the holder's next renewal misses
and it cancels the run (JOB_SLOT_LOST). A job over any cap is passed over, ready and unspent;
``when_busy='fail'`` settles it failed with JOB_KEY_BUSY instead, its body never run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from workhorse.drivers.base import Buried, Claimed, ClaimResult, FlowRules
from workhorse.drivers.memory_core import MemoryCore, _load, _Row

Scope = tuple[str, ...]  # what a cap counts: ("name", n), ("key", n, k), ("tenant", t), ("queue", q), ...
_WAITING = ("ready", "delayed", "suspended")


def _caps(flow: FlowRules, r: _Row) -> list[tuple[Scope, int]]:
    """Every cap a run of ``r`` counts toward (a rate counts starts, the others running runs)."""
    caps: list[tuple[Scope, int]] = []
    if (name_cap := flow.names.get(r.name)) is not None:
        caps.append((("name", r.name), name_cap))
    if (keyed := flow.keyed.get(r.name)) is not None and (r.flow_key is not None or keyed[0] == 0):
        caps.append((("key", r.name, r.flow_key or ""), keyed[0]))  # a key cap of 0 stops every key
    if r.tenant is not None and flow.per_tenant is not None:
        caps.append((("tenant", r.tenant), flow.per_tenant))
    if (queue_cap := flow.queue_cap(r.queue)) is not None:
        caps.append((("queue", r.queue), queue_cap))
    if flow.total is not None:
        caps.append((("total",), flow.total))
    if r.tenant is not None and flow.rate is not None:
        caps.append((("rate", r.tenant), flow.rate[0]))
    return caps


def _busy(flow: FlowRules, r: _Row, held: Counter[Scope]) -> bool:
    """``when_busy='fail'`` and its key already at a cap above 0 (a cap of 0 holds, refusing nothing)."""
    keyed = flow.keyed.get(r.name)
    return keyed is not None and keyed[1] and 0 < keyed[0] <= held["key", r.name, r.flow_key or ""]


def key_busy_error(r: _Row) -> str:
    """KEY_BUSY_ERROR's document, as text."""
    message = (
        f"concurrency key {r.flow_key or ''} of job {r.name} already runs at its cap; the job declares "
        "when_busy='fail', so this run was refused without running"
    )
    return json.dumps({"type": "JobKeyBusy", "code": "JOB_KEY_BUSY", "message": message, "traceback": None})


class MemoryFlow(MemoryCore):
    """FLOW_CLAIM for the memory driver; ``_flow_claim`` is called with ``self._lock`` held."""

    def _flow_claim(
        self, *, worker_id: str, wants: Mapping[str, int], names: Sequence[str], visibility: float, flow: FlowRules
    ) -> ClaimResult:
        now = self._now()
        wanted = {q: n for q, n in wants.items() if n > 0}
        name_set = set(names)

        def ours(r: _Row) -> bool:
            return r.name in name_set and r.queue in wanted

        running = [r for r in self._rows.values() if r.state == "running"]
        counted = {r.id: r for r in running if flow.counts(r.name, r.queue, r.tenant)}
        freed = [r for r in counted.values() if r.lapsed(now)]  # every lapsed slot, whoever held it
        for queue, slots in wanted.items():  # and the lapsed leases no cap counts, ours to re-take
            loose = [r for r in running if r.queue == queue and ours(r) and r.lapsed(now) and r.id not in counted]
            freed += sorted(loose, key=lambda r: (r.lease_expires_at or now, r.id))[:slots]
        freed_ids = {r.id for r in freed}
        held: Counter[Scope] = Counter()
        for r in counted.values():
            if r.id not in freed_ids:
                held.update(scope for scope, _ in _caps(flow, r) if scope[0] != "rate")
        starts = self._rate_window(flow, now)
        held.update({("rate", tenant): len(at) for tenant, at in starts.items()})

        def open_now(r: _Row) -> bool:  # the due arm skips what a full cap keeps; a refusing key's are taken
            refusing = flow.keyed.get(r.name, (0, False))[1]
            return all(held[s] < cap for s, cap in _caps(flow, r) if not (s[0] == "key" and refusing and cap > 0))

        lapsed_arm = sorted(freed, key=lambda r: (-r.priority, r.lease_expires_at or now, r.id))
        candidates = [r for r in lapsed_arm if ours(r) and r.attempt < r.max_attempts]
        for queue, slots in wanted.items():  # `room`: the queue's slots, within its cap and the total's
            queue_cap = flow.queue_cap(queue)
            room = min(
                slots,
                slots if queue_cap is None else queue_cap - held["queue", queue],
                slots if flow.total is None else flow.total - held["total",],
            )
            due = [r for r in self._rows.values() if r.queue == queue and ours(r) and r.state in _WAITING]
            due = [r for r in due if r.run_at <= now and open_now(r)]
            candidates += sorted(due, key=lambda r: (-r.priority, r.run_at, r.id))[: max(room, 0)]

        took: Counter[Scope] = Counter()  # `walk`: what this claim took, by cap
        taken: list[_Row] = []
        refused: list[_Row] = []
        held_back = 0
        for r in candidates:
            caps = _caps(flow, r)
            if _busy(flow, r, held):
                refused.append(r)
            elif took["slots", r.queue] < wanted[r.queue] and all(held[s] + took[s] < cap for s, cap in caps):
                taken.append(r)
                took.update([("slots", r.queue), *(scope for scope, _ in caps)])
            else:
                held_back += 1

        buried = [r.bury(now) for r in freed if ours(r) and r.attempt >= r.max_attempts]
        decided = {r.id for r in (*taken, *refused)} | {b.id for b in buried}
        for r in freed:
            if r.id not in decided:  # `revoked`: its holder's next renewal misses (JOB_SLOT_LOST)
                r.claims, r.worker_id = r.claims + 1, None
        lease = now + timedelta(seconds=visibility)
        claimed: list[Claimed] = [r.claim(worker_id, lease, now) for r in taken]
        if flow.rate is not None:
            self._flow_starts += [(c.tenant, now) for c in claimed if c.tenant is not None]
        claimed.sort(key=lambda c: (-c.priority, c.run_at, c.id))
        later = [r.run_at for r in self._rows.values() if ours(r) and r.state in _WAITING and r.run_at > now]
        later += [  # a lease that may lapse: a slot frees, or a lapsed job of ours to re-take
            r.lease_expires_at
            for r in running
            if (r.id in counted or ours(r)) and r.lease_expires_at is not None and r.lease_expires_at > now
        ]
        if flow.rate is not None:  # a spent rate window reopens when its oldest start ages out
            window = timedelta(seconds=flow.rate_window or 0.0)
            later += [min(at) + window for at in starts.values() if len(at) >= flow.rate[0] > 0]
        next_due = None if not later else (min(later) - now).total_seconds()
        refusals = [self._refuse(r, now) for r in refused]
        return ClaimResult(claimed, buried, next_due, refused=refusals, held_back=held_back)

    def _rate_window(self, flow: FlowRules, now: datetime) -> dict[str, list[datetime]]:
        """Per tenant, its starts inside the sliding rate window (older ones are dropped)."""
        if flow.rate is None:
            return {}
        since = now - timedelta(seconds=flow.rate_window or 0.0)
        self._flow_starts = [(tenant, at) for tenant, at in self._flow_starts if at > since]
        starts: dict[str, list[datetime]] = {}
        for tenant, at in self._flow_starts:
            starts.setdefault(tenant, []).append(at)
        return starts

    def _refuse(self, r: _Row, now: datetime) -> Buried:
        """`refused`: settled failed with JOB_KEY_BUSY, an attempt spent, the body never run."""
        r.attempt, r.claims, r.state, r.last_error = r.attempt + 1, r.claims + 1, "failed", key_busy_error(r)
        r.note_error(r.last_error, now)
        r.worker_id, r.lease_expires_at = None, None
        r.started_at = r.finished_at = r.updated_at = now
        return Buried(
            id=r.id, name=r.name, queue=r.queue, tenant=r.tenant, state=r.state, payload=_load(r.payload),
            attempt=r.attempt, max_attempts=r.max_attempts, last_error=_load(r.last_error),
        )  # fmt: skip
