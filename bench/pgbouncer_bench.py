"""Behind PgBouncer in transaction mode (issue 31, part 3): pickup latency with wake-ups over
``WORKHORSE_LISTEN_URL`` and without (polling), and sequential single enqueues/s through the bouncer
beside PostgreSQL directly, with and without the pooled settings (what prepared statements save).

    python bench/pgbouncer_bench.py [--jobs 20] [--enqueues 2000]

Starts Debian's ``pgbouncer`` on a private port (pool_mode=transaction, in front of
``WORKHORSE_DATABASE_URL``), migrates a schema of its own, prints one JSON line per figure, and
drops the schema and stops the bouncer at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from typing import Any

import psycopg

from workhorse import App, JobContext


def start_bouncer(url: str) -> tuple[subprocess.Popen[bytes], str, str]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    info = psycopg.conninfo.conninfo_to_dict(url)
    folder = tempfile.mkdtemp(prefix="wh-pgbouncer-bench-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    user = str(info.get("user") or "postgres")
    with open(f"{folder}/users.txt", "w") as f:
        f.write(f'"{user}" ""\n')
    with open(f"{folder}/pgbouncer.ini", "w") as f:
        f.write(
            f"[databases]\n* = host={info.get('host') or '127.0.0.1'} port={info.get('port') or 5432}\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {folder}/users.txt\npool_mode = transaction\n"
            f"max_client_conn = 1000\ndefault_pool_size = 20\nlogfile = {folder}/pgbouncer.log\n"
        )
    # pgbouncer refuses to run as root: run as root, it drops to postgres, who must read these
    os.chmod(folder, 0o777)  # noqa: S103 - a private temporary folder, removed at the end
    for name in os.listdir(folder):
        os.chmod(f"{folder}/{name}", 0o666)  # noqa: S103
    as_root = ["-u", "postgres"] if os.geteuid() == 0 else []
    proc = subprocess.Popen([binary, *as_root, f"{folder}/pgbouncer.ini"], stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    info["host"], info["port"] = "127.0.0.1", str(port)
    return proc, psycopg.conninfo.make_conninfo(**info), folder  # type: ignore[arg-type]


async def pickups(url: str, schema: str, jobs: int) -> list[float]:
    """ms from each enqueue to its body starting, one job at a time, a worker idle between them."""
    app = App(url, schema=schema)
    started: list[float] = []
    ran = asyncio.Event()

    @app.job(name="bench.pickup", tenant="none")
    async def mark(ctx: JobContext, payload: Any) -> None:
        started.append(time.monotonic())
        ran.set()

    worker = app.worker(handle_signals=False, poll_interval="2s")
    run = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)
    found = []
    for _ in range(jobs):
        await asyncio.sleep(0.3)
        ran.clear()
        sent = time.monotonic()
        await mark.enqueue({})
        await asyncio.wait_for(ran.wait(), 10)
        found.append((started[-1] - sent) * 1000)
    await worker.stop()
    await run
    await app.close()
    return found


async def enqueues(url: str, schema: str, n: int) -> float:
    app = App(url, schema=schema)

    @app.job(name="bench.enq", tenant="none")
    async def enq(ctx: JobContext, payload: Any) -> None:
        return None

    await enq.enqueue({})
    began = time.perf_counter()
    for _ in range(n):
        await enq.enqueue({})
    rate = n / (time.perf_counter() - began)
    await app.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--enqueues", type=int, default=2000)
    args = parser.parse_args()
    direct = os.environ.get("WORKHORSE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    proc, bounced, folder = start_bouncer(direct)
    schema = f"bench_pgb_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(App(direct, schema=schema).migrate())
        os.environ["WORKHORSE_POOLER"] = "transaction"
        for label, listen in (("listen_url", direct), ("polling", "")):
            os.environ["WORKHORSE_LISTEN_URL"] = listen
            ms = asyncio.run(pickups(bounced, schema, args.jobs))
            print(json.dumps({"pickup": label, "p50_ms": round(statistics.median(ms), 1), "max_ms": round(max(ms))}))
        for rnd in range(3):  # interleaved rounds
            for label, url, pooler in (
                ("pgbouncer", bounced, "transaction"),
                ("direct, pooled settings (no prepared statements)", direct, "transaction"),
                ("direct", direct, ""),
            ):
                os.environ["WORKHORSE_POOLER"] = pooler
                rate = asyncio.run(enqueues(url, schema, args.enqueues))
                print(json.dumps({"enqueue": label, "round": rnd, "jobs_per_s": round(rate)}), flush=True)
    finally:
        with psycopg.connect(direct, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
