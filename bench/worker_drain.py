"""W2 (workhorse side): drain every due job with ONE worker in burst mode, in its own process.

    python bench/worker_drain.py

Reads ``WORKHORSE_BENCH_URL`` / ``WORKHORSE_BENCH_SCHEMA`` (see ``benchapp``). The clock starts just
before the worker is created (so it includes checking the schema and opening the worker's
connections) and stops when ``run(burst=True)`` returns. Prints one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from benchapp import app


async def drain(concurrency: int) -> dict[str, object]:
    started = time.perf_counter()
    worker = app.worker(concurrency=concurrency)
    stats = await worker.run(burst=True)
    seconds = time.perf_counter() - started
    await app.close()
    return {"seconds": seconds, "stats": stats.as_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(drain(args.concurrency))), flush=True)


if __name__ == "__main__":
    main()
