"""What a webhook delivery costs: N deliveries to a receiver on 127.0.0.1 (http, answering 200 at
once) drained by one in-process worker, against the same N plain jobs that do nothing.

    WORKHORSE_DATABASE_URL=... .venv/bin/python bench/webhooks_bench.py --deliveries 500 --concurrency 20

Prints one JSON line: deliveries/s, the plain jobs/s beside it, and the ledger's latency_ms
(connect + request + answer) p50/p95. Runs in a throwaway schema it drops at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from webhookkit import serving
from workhorse import App, JobContext, Retry
from workhorse.webhooks import WebhookPolicy


async def bench(url: str, n: int, concurrency: int) -> dict[str, object]:
    schema = f"bench_wh_{uuid.uuid4().hex[:8]}"
    policy = WebhookPolicy(allow_private=True, allow_http=True, retry=Retry(attempts=1))
    app = App(url, schema=schema, webhooks=policy)

    @app.job(name="noop", tenant="none", queue="plain")
    async def noop(ctx: JobContext, payload: int) -> None:
        return None

    await app.migrate()
    try:
        with serving() as receiver:
            endpoint = await app.webhooks.add_endpoint(receiver.url, tenant="o1")
            for i in range(n):
                await app.webhooks.send(endpoint.id, "bench", {"i": i})
            started = time.perf_counter()
            await app.worker(queues=["webhooks"], concurrency=concurrency, handle_signals=False).run(burst=True)
            hooks = time.perf_counter() - started
            assert len(receiver.received) == n, len(receiver.received)
        await noop.enqueue_many(list(range(n)))
        started = time.perf_counter()
        await app.worker(queues=["plain"], concurrency=concurrency, handle_signals=False).run(burst=True)
        plain = time.perf_counter() - started
        latencies: list[float] = []
        after = None
        while True:
            page = await app.webhooks.deliveries(endpoint.id, limit=200, after=after)
            latencies += [d.latency_ms or 0.0 for d in page.deliveries]
            if page.next is None:
                break
            after = page.next
        cuts = statistics.quantiles(latencies, n=20)
        return {
            "deliveries": n,
            "concurrency": concurrency,
            "deliveries_per_s": round(n / hooks, 1),
            "plain_jobs_per_s": round(n / plain, 1),
            "latency_ms_p50": round(statistics.median(latencies), 2),
            "latency_ms_p95": round(cuts[18], 2),
        }
    finally:
        await app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    url = os.environ["WORKHORSE_DATABASE_URL"]
    print(json.dumps(asyncio.run(bench(url, args.deliveries, args.concurrency))))


if __name__ == "__main__":
    main()
