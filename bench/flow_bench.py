"""Flow-control workloads of ``bench/run.py`` (W2cap, W5): what a cap costs, beside the same work uncapped.

W2cap  W2's drain (same size, one worker process at concurrency 10, burst) of a job declared
       ``tenant=lambda p: p["org"]`` over 100 orgs, with ``Limits(per_tenant=5)``: every claim is
       FLOW_LOCK + FLOW_CLAIM. The orgs come in runs of 10 consecutive jobs, so a claim of 10 meets
       one org's run and the cap binds (5 taken, 5 held back), while the other 99 orgs keep the
       worker's 10 slots full. Beside it, in interleaved rounds of the same run: W2's own uncapped
       drain (``bench.noop``, the plain claim). Each side reports its median round.
W5     One tenant's backlog: tenant A has 20,000 ready jobs and holds its 2 slots of
       ``per_tenant=2``; tenant B has 10 ready jobs enqueued after A's. (a) The latency of one flow
       claim (``driver.claim(..., flow=rules_for(Limits(per_tenant=2), ...))``, wants 10) that must
       pass A's backlog to find B's jobs; B's rows are put back ready between claims. Baseline: the
       plain claim (``flow=None``) on a table of 10 ready jobs (its own schema), interleaved claim by
       claim; also the flow claim on that small table (the cap's cost without the backlog).
       (b) Fairness: ``workhorse worker --concurrency 10`` under ``per_tenant=2`` running 50 ms
       bodies, A's backlog as above: ms from B's enqueue until all 10 of B's jobs started.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from typing import Any

import psycopg

from workhorse import App, JobContext, Limits
from workhorse.limits.rules import rules_for

ORGS = 100  # W2cap: tenants
ORG_RUN = 10  # W2cap: consecutive jobs of one org
W2CAP_PER_TENANT = 5
W2CAP_ROUNDS = 3  # at most, per side: a capped round of the full size lasts over a minute on 2 cores
W5_BACKLOG = 20_000
W5_PER_TENANT = 2
W5_CLAIMS = 50  # measured claims per side
W5_WARMUP = 5  # untimed claims per side first
W5_FAIR_ROUNDS = 5
W5_BODY_MS = 50
W5_NAME = "bench.org_sleep"
CHUNK = 5_000  # enqueue_many batch

RESET = (
    "update {schema}.jobs set state = 'ready', attempt = 0, claims = 0, worker_id = null, "
    "lease_expires_at = null, started_at = null, updated_at = now() where id = any(%s::uuid[])"
)

# Sampled while a worker runs: the most running rows of one tenant (of those matching a LIKE
# pattern) and of all of them, in one snapshot. (started_at/finished_at cannot audit a cap: each is
# its transaction's now(), and a claim's transaction begins before it waits for FLOW_LOCK and takes
# its snapshot, so a run can look started just before the run whose slot it took had settled.)
SAMPLE = """
select coalesce(max(n), 0), coalesce(sum(n), 0) from (
    select count(*) as n from {schema}.jobs where state = 'running' and coalesce(tenant, '') like %s group by tenant
) as t
"""
SAMPLE_EVERY = 0.01


class Sampler:
    """Polls SAMPLE on a connection of its own until stopped: the largest per-tenant and total
    running counts seen, and the mean total."""

    def __init__(self, b: Any, tenants: str) -> None:
        self.b, self.tenants = b, tenants
        self.per_tenant = 0
        self.totals: list[int] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        query = SAMPLE.format(schema=self.b.wh)
        async with await psycopg.AsyncConnection.connect(self.b.url, autocommit=True) as conn:
            while not self._stop.is_set():
                cur = await conn.execute(query, (self.tenants,))  # type: ignore[arg-type]
                row = await cur.fetchone()
                assert row is not None
                self.per_tenant = max(self.per_tenant, int(row[0]))
                if row[1]:
                    self.totals.append(int(row[1]))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), SAMPLE_EVERY)

    def report(self) -> dict[str, Any]:
        return {
            "samples": len(self.totals),
            "max_running_per_tenant": self.per_tenant,
            "mean_running": round(statistics.fmean(self.totals), 2) if self.totals else 0,
            "max_running": max(self.totals, default=0),
        }


def log(b: Any, message: str) -> None:
    b.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", highlight=False)


def summary(seconds: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in seconds)

    def rank(q: float) -> float:
        return ms[max(1, math.ceil(q / 100 * len(ms))) - 1]

    return {
        "samples": len(ms),
        "p50_ms": round(rank(50), 3),
        "p99_ms": round(rank(99), 3),
        "max_ms": round(ms[-1], 3),
        "min_ms": round(ms[0], 3),
    }


def org_payload(i: int) -> dict[str, Any]:
    return {"n": i, "to": "user@example.com", "org": f"org-{(i // ORG_RUN) % ORGS:03d}"}


async def enqueue(handle: Any, payloads: list[dict[str, Any]]) -> None:
    for start in range(0, len(payloads), CHUNK):
        await handle.enqueue_many(payloads[start : start + CHUNK])


async def migrate(b: Any) -> None:
    """``workhorse migrate`` in a subprocess, as the code on disk now stands: this checkout is shared,
    and a migration added since the run began would stop the next worker subprocess (SCHEMA_BEHIND)."""
    proc = await b.spawn(
        "migrate", "-m", "workhorse", "--app", "benchapp:app", "migrate", env=b.env(), pipe_stdout=False
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"workhorse migrate exited {proc.returncode}; see {b.logs / 'migrate.log'}")


# -- W2cap ---------------------------------------------------------------------------------------


async def drain(b: Any, side: str, env: dict[str, str], tenants: str) -> dict[str, Any]:
    await migrate(b)
    await b.run(f"vacuum analyze {b.wh}.jobs")
    async with Sampler(b, tenants) as sampler:
        proc = await b.spawn(f"w2cap-{side}", "worker_drain.py", "--concurrency", "10", env=env, pipe_stdout=True)
        out: dict[str, Any] = await b.json_of(proc, f"w2cap-{side}", within=900)
    out["running"] = sampler.report()
    return out


async def w2cap(b: Any) -> dict[str, Any]:
    n = b.sizes.drain
    plain = [{"n": i, "to": "user@example.com"} for i in range(n)]
    orgs = [org_payload(i) for i in range(n)]
    base_rounds: list[dict[str, Any]] = []
    cap_rounds: list[dict[str, Any]] = []
    done_q = f"select count(*) from {b.wh}.jobs where state = 'done'"
    for r in range(min(b.sizes.rounds, W2CAP_ROUNDS)):
        await b.truncate(b.wh)
        await enqueue(b.jobs.noop, plain)
        log(b, f"W2cap round {r + 1}: W2 uncapped, one worker (concurrency 10, burst) draining {n:,} jobs")
        base_rounds.append(await drain(b, "uncapped", b.env(), "%"))
        if await b.scalar(done_q) != n:
            raise RuntimeError(f"W2cap: the uncapped drain left work undone ({await b.scalar(done_q)} of {n})")
        await b.truncate(b.wh)
        await enqueue(b.jobs.org_noop, orgs)
        log(b, f"W2cap round {r + 1}: per_tenant={W2CAP_PER_TENANT}, {ORGS} orgs, draining {n:,} jobs")
        env = b.env(WORKHORSE_BENCH_PER_TENANT=str(W2CAP_PER_TENANT))
        cap_rounds.append(await drain(b, "capped", env, "org-%"))
        if await b.scalar(done_q) != n:
            raise RuntimeError(f"W2cap: the capped drain left work undone ({await b.scalar(done_q)} of {n})")
    worst_tenant = max(o["running"]["max_running_per_tenant"] for o in cap_rounds)
    if worst_tenant > W2CAP_PER_TENANT:
        raise RuntimeError(f"W2cap: a tenant ran {worst_tenant} at once under per_tenant={W2CAP_PER_TENANT}")

    def side(rounds: list[dict[str, Any]]) -> dict[str, Any]:
        mid = sorted(rounds, key=lambda o: o["seconds"])[len(rounds) // 2]
        return {
            "jobs": n,
            "seconds": round(mid["seconds"], 4),
            "jobs_per_s": round(n / mid["seconds"], 1),
            "worker_stats": mid["stats"],
            "running_sampled": mid["running"],
            "rounds_s": [round(o["seconds"], 4) for o in rounds],
        }

    wh, base = side(cap_rounds), side(base_rounds)
    wh["what"] = (
        f"{n:,} no-op jobs of `tenant=lambda p: p['org']` over {ORGS} orgs (runs of {ORG_RUN} consecutive jobs "
        f"per org), App(limits=Limits(per_tenant={W2CAP_PER_TENANT})): every claim is FLOW_LOCK + FLOW_CLAIM "
        f"(median of {len(cap_rounds)} rounds)"
    )
    wh["max_running_per_tenant_any_round"] = worst_tenant
    base["what"] = (
        f"W2's drain in the same run: {n:,} bench.noop jobs, no limits (the plain claim), one worker process at "
        f"concurrency 10 (median of {len(base_rounds)} rounds, interleaved with the capped side)"
    )
    return {
        "title": "drain under a per-tenant cap, one worker process",
        "unit": "jobs/s",
        "workhorse": wh,
        "baseline": base,
        "ratio": round(wh["jobs_per_s"] / base["jobs_per_s"], 3),
        "target": "none (measured: the cost of the cap, W2cap / W2)",
        "pass": True,
    }


# -- W5 ------------------------------------------------------------------------------------------


async def w5(b: Any) -> dict[str, Any]:
    latency = await w5_claims(b)
    fairness = await w5_fairness(b)
    return {**latency, "fairness": fairness}


async def w5_claims(b: Any) -> dict[str, Any]:
    app, handle = b.jobs.app, b.jobs.org_sleep
    rules = rules_for(Limits(per_tenant=W5_PER_TENANT), {W5_NAME: None})
    queue = b.jobs.QUEUE
    await b.truncate(b.wh)
    await enqueue(handle, [{"org": "A", "n": i} for i in range(W5_BACKLOG)])
    held = await app.driver.claim(
        worker_id="bench-w5-a", wants={queue: W5_PER_TENANT}, names=[W5_NAME], visibility=3600, flow=rules
    )
    if len(held.claimed) != W5_PER_TENANT:
        raise RuntimeError(f"W5: tenant A took {len(held.claimed)} slots, expected {W5_PER_TENANT}")
    await handle.enqueue_many([{"org": "B", "n": i} for i in range(10)])
    await b.run(f"vacuum analyze {b.wh}.jobs")

    # The baseline's own schema: a table holding just B's 10 ready jobs.
    small_schema = f"{b.wh}_w5"
    await b.run(f"create schema {small_schema}")
    small = App(b.url, schema=small_schema)

    @small.job(name=W5_NAME, queue=queue, tenant=lambda p: p["org"])
    async def small_sleep(ctx: JobContext, payload: Any) -> None:
        """Never run: only claimed and put back."""

    try:
        await small.migrate()
        await small_sleep.enqueue_many([{"org": "B", "n": i} for i in range(10)])
        await b.run(f"vacuum analyze {small_schema}.jobs")
        sides: dict[str, list[float]] = {"flow_backlog": [], "plain_small": [], "flow_small": []}
        got: dict[str, set[tuple[int, int]]] = {k: set() for k in sides}
        calls = {
            "flow_backlog": (app, b.wh, rules),
            "plain_small": (small, small_schema, None),
            "flow_small": (small, small_schema, rules),
        }
        for i in range(W5_WARMUP + W5_CLAIMS):
            for key, (owner, schema, flow) in calls.items():
                started = time.perf_counter()
                result = await owner.driver.claim(
                    worker_id="bench-w5", wants={queue: 10}, names=[W5_NAME], visibility=30, flow=flow
                )
                took = time.perf_counter() - started
                ids = [c.id for c in result.claimed]
                if any(c.tenant != "B" for c in result.claimed):
                    raise RuntimeError(f"W5: the {key} claim took a job of tenant A")
                got[key].add((len(ids), result.held_back))
                await b.run(RESET.format(schema=schema), (ids,))
                if i >= W5_WARMUP:
                    sides[key].append(took)
    finally:
        await small.close()
        await b.run(f"drop schema if exists {small_schema} cascade")
    expect = {"flow_backlog": (W5_PER_TENANT, 10 - W5_PER_TENANT), "plain_small": (10, 0)}
    for key, want in expect.items():
        if got[key] != {want}:
            raise RuntimeError(f"W5: the {key} claims answered (claimed, held_back) {got[key]}, expected {want}")
    wh, base, flow_small = (summary(sides[k]) for k in ("flow_backlog", "plain_small", "flow_small"))
    wh["what"] = (
        f"driver.claim(wants 10, flow=rules_for(Limits(per_tenant={W5_PER_TENANT}))): FLOW_LOCK + FLOW_CLAIM, "
        f"{W5_BACKLOG:,} ready jobs of tenant A (which holds its {W5_PER_TENANT} slots) ahead of tenant B's 10; "
        f"takes {W5_PER_TENANT} of B's, holds {10 - W5_PER_TENANT} back; B's rows put back ready between claims"
    )
    wh["claimed_held_back"] = sorted(got["flow_backlog"])
    base["what"] = (
        "driver.claim(wants 10, flow=None): the plain CLAIM (with its lapsed-lease sweep) on a table holding "
        "10 ready jobs, put back ready between claims; interleaved claim by claim with the flow side"
    )
    flow_small["what"] = "the same flow claim on the baseline's 10-job table (no backlog, nothing held)"
    flow_small["claimed_held_back"] = sorted(got["flow_small"])
    return {
        "title": f"flow claim past one tenant's {W5_BACKLOG:,}-job backlog",
        "unit": "ms",
        "workhorse": wh,
        "baseline": base,
        "flow_no_backlog": flow_small,
        "ratio": {"p50": round(wh["p50_ms"] / base["p50_ms"], 3), "p99": round(wh["p99_ms"] / base["p99_ms"], 3)},
        "target": "none (measured)",
        "pass": True,
    }


async def w5_fairness(b: Any) -> dict[str, Any]:
    handle = b.jobs.org_sleep
    await b.truncate(b.wh)
    await enqueue(handle, [{"org": "A", "n": i} for i in range(W5_BACKLOG)])
    await b.run(f"vacuum analyze {b.wh}.jobs")
    await migrate(b)
    log(b, f"W5: `workhorse worker --concurrency 10`, per_tenant={W5_PER_TENANT}, {W5_BACKLOG:,} jobs of A")
    worker = await b.spawn(
        "w5-worker", "-m", "workhorse", "--app", "benchapp:app", "worker", "--concurrency", "10",
        env=b.env(WORKHORSE_BENCH_PER_TENANT=str(W5_PER_TENANT)), pipe_stdout=False,
    )  # fmt: skip

    def count(tenant: str, where: str) -> str:  # tenants are this module's constants
        return f"select count(*) from {b.wh}.jobs where tenant = '{tenant}' and {where}"

    spans: list[float] = []
    firsts: list[float] = []
    a_running: list[int] = []
    sampler = Sampler(b, "%")
    try:
        await b.wait_until(count("A", "state = 'done'"), 20, 60, "tenant A's first jobs to finish")
        await sampler.__aenter__()
        for r in range(W5_FAIR_ROUNDS):
            tenant = f"B{r}"
            await handle.enqueue_many([{"org": tenant, "n": i} for i in range(10)])
            a_running.append(int(await b.scalar(count("A", "state = 'running'"))))
            await b.wait_until(count(tenant, "started_at is not null"), 10, 60, f"{tenant}'s jobs to start")
            cur = await b.admin.execute(
                f"select extract(epoch from max(started_at) - min(created_at)) * 1000, "  # type: ignore[arg-type]
                f"extract(epoch from min(started_at) - min(created_at)) * 1000 from {b.wh}.jobs where tenant = %s",
                (tenant,),
            )
            row = await cur.fetchone()
            assert row is not None
            spans.append(float(row[0]))
            firsts.append(float(row[1]))
            await b.wait_until(count(tenant, "state = 'done'"), 10, 60, f"{tenant}'s jobs to finish")
    finally:
        await sampler.__aexit__()
        await b.stop(worker)
    running = sampler.report()
    if running["max_running_per_tenant"] > W5_PER_TENANT:
        raise RuntimeError(f"W5: a tenant ran {running['max_running_per_tenant']} at once under per_tenant=2")
    waves = math.ceil(10 / W5_PER_TENANT)
    return {
        "unit": "ms",
        "all_started_ms": round(statistics.median(spans), 1),
        "rounds_ms": [round(s, 1) for s in spans],
        "first_started_ms": [round(s, 1) for s in firsts],
        "floor_ms": (waves - 1) * W5_BODY_MS,
        "a_running_at_enqueue": a_running,
        "running_sampled": running,
        "what": (
            f"median of {len(spans)} rounds: one `workhorse worker --concurrency 10` with "
            f"App(limits=Limits(per_tenant={W5_PER_TENANT})), {W5_BODY_MS} ms bodies, {W5_BACKLOG:,} ready jobs of "
            f"tenant A; each round enqueues 10 jobs of a new tenant B<r> (one enqueue_many) and measures "
            f"max(started_at) - created_at on the server's clock. floor: {waves} waves of {W5_PER_TENANT}, "
            f"{W5_BODY_MS} ms apart"
        ),
    }
