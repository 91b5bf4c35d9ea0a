"""Server connections one worker process holds (issue 31, part 5), by ``application_name``.

    python bench/connections.py [--concurrency 10] [--seconds 6]

On a database of its own (created and dropped here, on ``WORKHORSE_DATABASE_URL``'s server), one
``workhorse worker`` process at ``--concurrency`` runs 50 ms jobs while this samples
``pg_stat_activity`` every 100 ms; prints the most connections seen at once per role, with and
without the scheduler role (``--no-scheduler``), as one JSON line each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

HERE = Path(__file__).parent
COUNT = """select coalesce(application_name, '') as role, count(*) from pg_stat_activity
where datname = %s and pid <> pg_backend_pid() group by 1"""


def _url(base: str, database: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(base)
    info["dbname"] = database
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


async def _prepare(url: str, jobs: int) -> None:
    os.environ["WORKHORSE_BENCH_URL"] = url
    sys.path.insert(0, str(HERE))
    from benchapp import app, org_sleep

    await app.migrate()
    await org_sleep.enqueue_many([{"org": f"o{i % 50}"} for i in range(jobs)])
    await app.close()


def measure(base: str, database: str, concurrency: int, seconds: float, scheduler: bool) -> dict[str, object]:
    url = _url(base, database)
    env = {**os.environ, "WORKHORSE_BENCH_URL": url, "PYTHONPATH": str(HERE)}
    command = [sys.executable, "-m", "workhorse", "--app", "benchapp:app", "worker"]
    command += ["--concurrency", str(concurrency), "--log-level", "warning"]
    command += [] if scheduler else ["--no-scheduler"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak: dict[str, int] = {}
    total = 0
    with psycopg.connect(base, autocommit=True) as conn:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rows = conn.execute(COUNT, (database,)).fetchall()
            for role, n in rows:
                peak[role] = max(peak.get(role, 0), n)
            total = max(total, sum(n for _, n in rows))
            time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=60)
    return {"concurrency": concurrency, "scheduler": scheduler, "peak_total": total, "peak_by_role": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    base = os.environ.get("WORKHORSE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    database = f"wh_conn_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"create database {database}")  # type: ignore[arg-type]
    try:
        asyncio.run(_prepare(_url(base, database), int(args.concurrency * args.seconds * 50)))
        for scheduler in (True, False):
            print(json.dumps(measure(base, database, args.concurrency, args.seconds, scheduler)), flush=True)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (database,))
            admin.execute(f"drop database if exists {database}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
