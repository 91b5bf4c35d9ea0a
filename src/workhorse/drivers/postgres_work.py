"""The PostgreSQL driver's work role (``PostgresWork``): what a worker calls, each one statement,
and the wake-ups it opens (a LISTEN session of its own).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import workhorse.leader.queries as rescue_sql
import workhorse.limits.queries as flow_sql
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import jobs as sql
from workhorse._db.queries import workers as worker_sql
from workhorse.drivers import refusals
from workhorse.drivers.listener import Listener
from workhorse.drivers.pooler import listen_url
from workhorse.drivers.postgres_core import PostgresCore, _is_uuid
from workhorse.types import (
    Beat,
    Buried,
    Claimed,
    ClaimResult,
    FlowRules,
    Lease,
    Rescued,
    Settlement,
    StepFence,
    WorkerInfo,
)

_ARRAY_ESCAPES = str.maketrans({'"': '\\"', "\\": "\\\\"})


def pg_array(values: Iterable[str | int | float | None]) -> str:
    """A one-dimensional array in PostgreSQL's text input format, for a parameter the statement
    casts to an array type (``%(ids)s::uuid[]``). psycopg adapts a list element by element in
    Python; on the worker's hot path (every claim and settle) that cost about 250 us of client CPU
    per 8-array settle of 24 rows, against one join here. Every element is quoted, so commas,
    braces, spaces and the word NULL stay data; None is NULL. Only an element holding a quote or
    a backslash is escaped: ``str.translate`` costs about a microsecond even when it changes
    nothing, and ids and numbers never need it."""
    out: list[str] = []
    for v in values:
        if v is None:
            out.append("NULL")
            continue
        text = v if type(v) is str else str(v)
        if '"' in text or "\\" in text:
            text = text.translate(_ARRAY_ESCAPES)
        out.append('"' + text + '"')
    return "{" + ",".join(out) + "}"


def _flow_params(flow: FlowRules) -> dict[str, Any]:
    """FLOW_CLAIM's rule parameters."""
    return {
        "cap_names": pg_array(flow.names),
        "cap_limits": pg_array(flow.names.values()),
        "key_names": pg_array(flow.keyed),
        "key_limits": pg_array(cap for cap, _ in flow.keyed.values()),
        "key_fail": pg_array("t" if fail else "f" for _, fail in flow.keyed.values()),
        "tenant_cap": flow.per_tenant,
        "queue_cap_names": pg_array(flow.per_queue),
        "queue_cap_limits": pg_array(flow.per_queue.values()),
        "queue_cap_default": flow.per_queue_default,
        "total_cap": flow.total,
        "rate_n": None if flow.rate is None else flow.rate[0],
        "rate_per": flow.rate_window,
    }


class PostgresWork(PostgresCore):
    """The work role: the claim, the heartbeat, the registry row, the settle and progress reports;
    and the optional wake-up role (``drivers/wakeups.py``) and rescue role (``RescueRole``)."""

    def open_wakeups(self, queues: Sequence[str], wake: asyncio.Event, beat: asyncio.Event) -> Listener | None:
        """Wake-ups for a worker: a LISTEN session of its own on this driver's channel, over
        ``WORKHORSE_LISTEN_URL`` when set; None (poll) behind a transaction pooler without it."""
        url = listen_url(self.url)
        if url is None:
            return None
        listener = Listener(url, self.channel, queues, wake, beat=beat)
        listener.start()
        return listener

    # -- claim, heartbeat, settle -----------------------------------------------------------------

    async def claim(
        self,
        *,
        worker_id: str,
        wants: Mapping[str, int],
        names: Sequence[str],
        visibility: float,
        sweep: bool = True,
        flow: FlowRules | None = None,
    ) -> ClaimResult:
        if not wants:
            raise refusals.claim_queues_empty()
        wanted = {q: n for q, n in wants.items() if n > 0}
        if not wanted or not names:
            return ClaimResult([], [])
        params: dict[str, Any] = {
            "worker_id": worker_id,
            "queues": pg_array(wanted),
            "slots": pg_array(wanted.values()),
            "names": pg_array(names),
            "visibility": visibility,
            "channel": self.channel,  # release_dependents wakes what a buried dependency released
        }
        if flow is None:
            rows = await self.fetch(sql.CLAIM if sweep else sql.CLAIM_DUE, params)
        else:
            params.update(_flow_params(flow))
            rows = await self.fetch(flow_sql.FLOW_CLAIM, params)  # one statement: its lock ends with it
        claimed: list[Claimed] = []
        buried: list[Buried] = []
        refused: list[Buried] = []
        next_due: float | None = None
        held_back = 0
        for r in rows:
            kind = r["kind"]
            if kind == "next":
                next_due = r["next_due"] if next_due is None else min(next_due, r["next_due"])
            elif kind == "held":
                held_back = int(r["next_due"])
            elif kind == "released":
                continue  # the dependents of buried or refused rows, moved and woken in the statement
            elif kind in ("buried", "refused"):
                (buried if kind == "buried" else refused).append(
                    Buried(
                        id=r["id"],
                        name=r["name"],
                        queue=r["queue"],
                        tenant=r["tenant"],
                        state=r["state"],
                        payload=r["payload"],
                        attempt=r["attempt"],
                        max_attempts=r["max_attempts"],
                        last_error=r["last_error"],
                    )
                )
            else:
                claimed.append(
                    Claimed(
                        id=r["id"],
                        name=r["name"],
                        queue=r["queue"],
                        tenant=r["tenant"],
                        payload=r["payload"],
                        attempt=r["attempt"],
                        max_attempts=r["max_attempts"],
                        claims=r["claims"],
                        priority=r["priority"],
                        created_at=r["created_at"],
                        run_at=r["run_at"],
                        traceparent=r["traceparent"],
                        dependencies=r["dependencies"],
                    )
                )
        # The statement does not promise an order across arms; hand jobs out in claim order.
        claimed.sort(key=lambda c: (-c.priority, c.run_at, c.id))
        return ClaimResult(claimed, buried, next_due, refused=refused, held_back=held_back)

    async def heartbeat(self, worker_id: str, leases: Sequence[Lease], visibility: float) -> Beat:
        rows = await self.fetch(
            sql.HEARTBEAT,
            {
                "worker_id": worker_id,
                "ids": [lease.job_id for lease in leases],
                "claims": [lease.claims for lease in leases],
                "visibility": visibility,
            },
        )
        return Beat(
            held={r["id"] for r in rows if r["kind"] == "job"},
            registered=any(r["kind"] == "worker" for r in rows),
        )

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        await self.fetch(
            worker_sql.REGISTER,
            {
                "id": info.id,
                "host": info.host,
                "pid": info.pid,
                "queues": list(info.queues),
                "concurrency": json.dumps(info.concurrency),
                "ttl": ttl,
            },
        )

    async def deregister_worker(self, worker_id: str) -> None:
        await self.fetch(worker_sql.DEREGISTER, {"id": worker_id})

    async def settle(self, settlements: Sequence[Settlement], *, release: bool = False) -> list[bool]:
        if not settlements:
            return []
        rows = await self.fetch(
            sql.SETTLE_MANY,
            {
                "ids": pg_array([s.job_id for s in settlements]),
                "worker_ids": pg_array([s.worker_id for s in settlements]),
                "claims": pg_array([s.claims for s in settlements]),
                "outcomes": pg_array([s.outcome for s in settlements]),
                "results": pg_array([s.result for s in settlements]),
                "errors": pg_array([s.error for s in settlements]),
                "delays": pg_array([s.delay for s in settlements]),
                "progresses": pg_array([s.progress for s in settlements]),
                "reasons": pg_array([s.reason for s in settlements]),
                "release": release,
                "channel": self.channel,
                "settled_channel": self.schema + sql.SETTLED_CHANNEL_SUFFIX,
            },
        )
        landed = {r["id"] for r in rows}
        if rows and rows[0]["released"]:
            for queue in rows[0]["released"]:  # dependents made ready: their wake trails, throttled
                self._wakes.owe(queue)
        return [s.job_id in landed for s in settlements]

    # -- the rescue of lapsed leases (the optional RescueRole) ------------------------------------

    async def rescue_lapsed(self, batch: int) -> Rescued:
        rows = await self.fetch(rescue_sql.RESCUE, {"batch": batch, "channel": self.channel})
        readied = [r["id"] for r in rows if r["kind"] == "readied"]
        buried = [
            Buried(
                id=r["id"],
                name=r["name"],
                queue=r["queue"],
                tenant=r["tenant"],
                state=r["state"],
                payload=r["payload"],
                attempt=r["attempt"],
                max_attempts=r["max_attempts"],
                last_error=r["last_error"],
            )
            for r in rows
            if r["kind"] == "buried"
        ]
        return Rescued(readied, buried)

    # -- progress -------------------------------------------------------------------------------

    async def record_progress(self, reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        writable = [i for i, (fence, _) in enumerate(reports) if _is_uuid(fence.job_id)]
        landed: set[int] = set()
        if writable:
            rows = await self.fetch(
                admin_sql.RECORD_PROGRESS,
                {
                    "ids": [reports[i][0].job_id for i in writable],
                    "worker_ids": [reports[i][0].worker_id for i in writable],
                    "claims": [reports[i][0].claims for i in writable],
                    "progresses": [reports[i][1] for i in writable],
                },
            )
            landed = {writable[r["n"] - 1] for r in rows}
        return [i in landed for i in range(len(reports))]
