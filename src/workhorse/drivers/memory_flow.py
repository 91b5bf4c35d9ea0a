"""The memory driver's FLOW_CLAIM (``_db/queries/flow.py``): the same caps, counted the same way,
under the driver's one lock instead of FLOW_CLAIM's advisory lock. Read that module's docstring for the rules;
this one follows its CTEs in order, named alike.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from workhorse.drivers.memory_core import MemoryCore, _load, _Row
from workhorse.types import Buried, Claimed, ClaimResult, FlowRules


def key_busy_error(row: _Row) -> str:
    """KEY_BUSY_ERROR's document, as text."""
    message = (
        f"concurrency key {row.flow_key or ''} of job {row.name} already runs at its cap; the job declares "
        "when_busy='fail', so this run was refused without running"
    )
    return json.dumps({"type": "JobKeyBusy", "code": "JOB_KEY_BUSY", "message": message, "traceback": None})


def _claim_order(candidate: tuple[int, _Row]) -> tuple[int, int, datetime | None, str]:
    """`candidates`' window order: the lapsed arm first (by lease), then the due arm."""
    arm, r = candidate
    return (arm, -r.priority, r.lease_expires_at if arm == 0 else r.run_at, r.id)


class MemoryFlow(MemoryCore):
    """FLOW_CLAIM for the memory driver. Called with ``self._lock`` held."""

    enforces_flow = True  # a worker refuses to start on a driver without it (JOB_CONCURRENCY_UNENFORCEABLE)

    def _flow_claim(
        self, *, worker_id: str, wants: Mapping[str, int], names: Sequence[str], visibility: float, flow: FlowRules
    ) -> ClaimResult:
        now = self._now()
        wanted = {q: n for q, n in wants.items() if n > 0 and q not in self._pauses}
        name_set = set(names)
        running = [r for r in self._rows.values() if r.state == "running" and flow.counts(r.name, r.queue, r.tenant)]
        freed = [r for r in running if r.lease_expires_at is not None and r.lease_expires_at < now]
        freed_ids = {r.id for r in freed}
        for queue, slots in wanted.items():  # `lapsed_ours`: the lapsed leases no cap counts, ours to re-take
            lapsed = [
                r
                for r in self._rows.values()
                if r.state == "running" and r.queue == queue and r.name in name_set and r.id not in freed_ids
                and r.lease_expires_at is not None and r.lease_expires_at < now
            ]  # fmt: skip
            freed += sorted(lapsed, key=lambda r: (r.lease_expires_at or now, r.id))[:slots]
        freed_ids = {r.id for r in freed}
        held = [r for r in running if r.id not in freed_ids]
        held_name = Counter(r.name for r in held)
        held_key: Counter[tuple[str, str | None]] = Counter(
            (r.name, r.flow_key) for r in held if r.flow_key is not None and r.name in flow.keyed
        )
        held_tenant = Counter(r.tenant for r in held if r.tenant is not None)
        held_queue = Counter(r.queue for r in held)
        starts = self._window(flow, now)
        full_names = {n for n, cap in flow.names.items() if held_name[n] >= cap}
        full_names |= {n for n, (cap, _) in flow.keyed.items() if cap == 0}  # a key cap of 0 stops every key
        full_keys = {k for k, n in held_key.items() if n >= flow.keyed[k[0]][0] and not flow.keyed[k[0]][1]}
        full_tenants = {t for t, n in held_tenant.items() if flow.per_tenant is not None and n >= flow.per_tenant}
        full_tenants |= {t for t, (n, _) in starts.items() if flow.rate is not None and n >= flow.rate[0]}

        every_tenant = flow.per_tenant == 0 or (flow.rate is not None and flow.rate[0] == 0)  # a hard stop

        def ours(r: _Row) -> bool:
            return r.name in name_set and r.queue in wanted

        candidates: list[tuple[int, _Row]] = [
            (0, r)
            for r in sorted(freed, key=lambda r: (-r.priority, r.lease_expires_at or now, r.id))
            if ours(r) and r.attempt < r.max_attempts
        ]
        for queue, slots in wanted.items():
            room = slots
            cap = flow.queue_cap(queue)
            if cap is not None:
                room = min(room, max(cap - held_queue[queue], 0))
            if flow.total is not None:
                room = min(room, max(flow.total - len(held), 0))
            due = [
                r
                for r in self._rows.values()
                if r.queue == queue
                and r.name in name_set
                and r.state in ("ready", "delayed", "suspended")
                and r.run_at <= now
                and r.name not in full_names
                and (r.tenant is None or (r.tenant not in full_tenants and not every_tenant))
                and (r.name, r.flow_key) not in full_keys
            ]
            candidates += [(1, r) for r in sorted(due, key=lambda r: (-r.priority, r.run_at, r.id))[:room]]
        candidates.sort(
            key=lambda c: (c[0], -c[1].priority, c[1].lease_expires_at if c[0] == 0 else c[1].run_at, c[1].id)
        )

        started = {t: n for t, (n, _) in starts.items()}
        took: Counter[tuple[str, object]] = Counter()  # `walk`'s took: what this claim took, by cap
        taken: list[_Row] = []
        refused: list[_Row] = []
        held_back = 0
        for _, r in candidates:
            key_cap = flow.keyed.get(r.name) if r.flow_key is not None else None
            queue_cap = flow.queue_cap(r.queue)
            name_cap = flow.names.get(r.name)
            tenant = r.tenant
            if key_cap is not None and key_cap[1] and 0 < key_cap[0] <= held_key[r.name, r.flow_key]:  # 0: a hard stop
                refused.append(r)
                continue
            if (
                took["q", r.queue] < wanted[r.queue]
                and (queue_cap is None or held_queue[r.queue] + took["q", r.queue] < queue_cap)
                and (name_cap is None or held_name[r.name] + took["n", r.name] < name_cap)
                and (key_cap is None or held_key[r.name, r.flow_key] + took["k", (r.name, r.flow_key)] < key_cap[0])
                and (
                    tenant is None
                    or flow.per_tenant is None
                    or held_tenant[tenant] + took["t", tenant] < flow.per_tenant
                )
                and (tenant is None or flow.rate is None or started.get(tenant, 0) + took["t", tenant] < flow.rate[0])
                and (flow.total is None or len(held) + took["all", None] < flow.total)
            ):
                taken.append(r)
                for scope in (("q", r.queue), ("n", r.name), ("k", (r.name, r.flow_key)), ("t", tenant), ("all", None)):
                    took[scope] += 1
            else:
                held_back += 1

        buried: list[Buried] = []
        for r in freed:
            if ours(r) and r.attempt >= r.max_attempts:
                buried.append(r.bury(now))
                self._count(r, r.state, now)
        decided = {r.id for r in taken} | {r.id for r in refused} | {b.id for b in buried}
        for r in freed:
            if r.id not in decided:  # `revoked`: its holder's next renewal misses
                r.claims, r.worker_id = r.claims + 1, None
        for r in taken:
            if r.id in freed_ids:
                self._count(r, "lapsed", now)
        lease = now + timedelta(seconds=visibility)
        claimed: list[Claimed] = [r.claim(worker_id, lease, now) for r in taken]
        if flow.rate is not None:
            self._flow_starts += [(c.tenant, now, c.id) for c in claimed if c.tenant is not None]
        refusals = [self._refuse(r, now) for r in refused]
        claimed.sort(key=lambda c: (-c.priority, c.run_at, c.id))
        return ClaimResult(
            claimed,
            buried,
            self._next_due(flow, wanted, name_set, held=held, starts=starts, now=now),
            refused=refusals,
            held_back=held_back,
        )

    def _window(self, flow: FlowRules, now: datetime) -> dict[str, tuple[int, datetime]]:
        """`pruned` then `starts`: per tenant, the starts inside the rate window and the oldest."""
        if flow.rate is None:
            return {}
        since = now - timedelta(seconds=flow.rate_window or 0.0)
        self._flow_starts = [s for s in self._flow_starts if s[1] > since]
        out: dict[str, tuple[int, datetime]] = {}
        for tenant, at, _ in self._flow_starts:
            n, oldest = out.get(tenant, (0, at))
            out[tenant] = (n + 1, min(oldest, at))
        return out

    def _refuse(self, r: _Row, now: datetime) -> Buried:
        """`refused`: settled failed with JOB_KEY_BUSY, the body never run."""
        error = key_busy_error(r)
        r.attempt, r.claims = r.attempt + 1, r.claims + 1
        r.state, r.last_error = "failed", error
        r.note_error(error, now)
        r.worker_id, r.lease_expires_at = None, None
        r.started_at = r.finished_at = r.updated_at = now
        self._count(r, "failed", now)
        return Buried(
            id=r.id, name=r.name, queue=r.queue, tenant=r.tenant, state=r.state, payload=_load(r.payload),
            attempt=r.attempt, max_attempts=r.max_attempts, last_error=_load(r.last_error),
        )  # fmt: skip

    def _next_due(
        self,
        flow: FlowRules,
        wanted: Mapping[str, int],
        names: set[str],
        *,
        held: list[_Row],
        starts: dict[str, tuple[int, datetime]],
        now: datetime,
    ) -> float | None:
        later = [
            r.run_at
            for r in self._rows.values()
            if r.queue in wanted and r.name in names and r.state in ("delayed", "suspended") and r.run_at > now
        ]
        later += [r.lease_expires_at for r in held if r.lease_expires_at is not None and r.lease_expires_at > now]
        later += [  # a lease no cap counts could lapse: this claim would re-take it
            r.lease_expires_at
            for r in self._rows.values()
            if r.state == "running" and r.queue in wanted and r.name in names
            and r.lease_expires_at is not None and r.lease_expires_at > now
        ]  # fmt: skip
        if flow.rate is not None:
            window = timedelta(seconds=flow.rate_window or 0.0)
            later += [oldest + window for n, oldest in starts.values() if n >= flow.rate[0]]
        return None if not later else (min(later) - now).total_seconds()
