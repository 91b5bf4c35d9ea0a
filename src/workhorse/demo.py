"""``workhorse demo``: watch a real queue retry, dead-letter, dedupe and delay jobs in about five seconds.

It uses the public API only (``App``, ``@app.job``, ``enqueue``, ``app.worker``, ``list_jobs``), in a
schema of its own (``workhorse_demo``, or ``--schema``) made afresh at the start and kept at the end,
so the commands it suggests (``workhorse --schema workhorse_demo ls --state dead``) show its jobs.
Read it top to bottom: it doubles as a tour of the library.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from workhorse import embedded
from workhorse.app import App
from workhorse.context import JobContext
from workhorse.drivers.direct import drop_schema
from workhorse.errors import TerminalError, WorkhorseError
from workhorse.ids import short_id
from workhorse.retry import Retry
from workhorse.types import FINISHED_STATES, Job
from workhorse.worker import Worker, WorkerStats

DEMO_SCHEMA = "workhorse_demo"  # the demo's own schema, kept after it (replaced by the next demo)
HARD_CAP = 45.0  # seconds: past this the demo stops its worker anyway and reports failure
SHOWN_STATES = ("ready", "delayed", "running", "done", "dead")
NAMES = ("send_email", "send_welcome", "sync_crm", "charge_card", "build_report", "send_reminder")
# name -> (how many jobs, final state, attempts used or None for any): what a correct queue produces
EXPECTED: dict[str, tuple[int, str, int | None]] = {
    "send_email": (20, "done", None),
    "send_welcome": (1, "done", None),  # enqueued twice with one key: one job
    "sync_crm": (1, "done", 3),
    "charge_card": (1, "dead", 1),
    "build_report": (1, "done", None),
    "send_reminder": (1, "done", None),
}
EXPECTED_JOBS = sum(count for count, _, _ in EXPECTED.values())
WHAT_YOU_SAW = """[bold]what you just saw[/bold]
  • retry with backoff: sync_crm raised ConnectionError twice; each time it was
    retried after a growing wait, and attempt 3 succeeded.
  • dead-letter queue: charge_card raised TerminalError, so it went straight to
    'dead' (attempts unspent), kept for a person to inspect, requeue or remove.
  • idempotency key and delay: the second send_welcome (same key) inserted
    nothing; send_reminder waited 4s as 'delayed', then ran.

The demo kept its jobs in the schema '{schema}' (the next demo replaces them). Look:
  workhorse --schema {schema} ls --state dead    # the dead-letter queue
  workhorse --schema {schema} show {dead_id}   # one job in full, with its last error
(for your own app's jobs, leave out --schema)"""


def declare(app: App) -> None:
    """The jobs a small SaaS might declare. Sleeps stand in for the real work.

    (The ``type: ignore`` on ``async def`` bodies works around ``app.job``'s typing, which mypy
    cannot solve for coroutine functions yet; a plain ``def`` checks fine.)
    """

    @app.job(name="send_email", queue="emails", tenant=lambda p: p["org"], retry=Retry(attempts=3))
    async def send_email(ctx: JobContext, p: dict[str, Any]) -> dict[str, str]:
        await asyncio.sleep(random.uniform(0.02, 0.08))  # a call to the mail relay
        return {"sent_to": p["to"]}

    @app.job(name="send_welcome", queue="emails", tenant=lambda p: p["org"])
    async def send_welcome(ctx: JobContext, p: dict[str, Any]) -> None:
        await asyncio.sleep(0.05)

    @app.job(name="sync_crm", tenant=lambda p: p["org"], retry=Retry(attempts=5, base=0.3, max_delay=1))
    def sync_crm(ctx: JobContext, p: dict[str, Any]) -> str:  # a plain `def` runs in a worker thread
        time.sleep(0.05)
        if ctx.attempt <= 2:  # the CRM is flaky today: the first two attempts time out
            raise ConnectionError("CRM timed out")
        return "synced"

    @app.job(name="charge_card", tenant=lambda p: p["org"], retry=Retry(attempts=3))
    async def charge_card(ctx: JobContext, p: dict[str, Any]) -> None:
        await asyncio.sleep(0.05)
        raise TerminalError("card declined")  # retrying cannot help: dead-letter it right away

    @app.job(name="build_report", tenant="none", timeout="30s")
    async def build_report(ctx: JobContext, p: dict[str, Any]) -> dict[str, int]:
        for i in range(1, 31):  # ~3 s in small steps, so a drain or timeout can cancel it promptly
            await asyncio.sleep(0.1)
            ctx.progress((i, 30), f"section {i} of 30")  # shown live below; one write a second at most
        return {"rows": 1234}

    @app.job(name="send_reminder", queue="emails", tenant="none")
    async def send_reminder(ctx: JobContext, p: dict[str, Any]) -> None:
        await asyncio.sleep(0.03)


async def enqueue_all(app: App, console: Console) -> None:
    emails = [{"org": f"org-{i % 3}", "to": f"user{i}@example.com"} for i in range(20)]
    await app.jobs["send_email"].enqueue_many(emails)
    console.print("enqueued 20 x send_email in one round trip (enqueue_many)")
    welcome = app.jobs["send_welcome"]
    for _ in range(2):
        ref = await welcome.enqueue({"org": "org-1", "user": 7}, key="welcome:7")
        console.print(f"enqueued send_welcome key='welcome:7': duplicate={ref.duplicate} id={short_id(ref.id)}")
    console.print("  (same key while the first is live: nothing inserted, the same job returned)")
    await app.jobs["sync_crm"].enqueue({"org": "org-2", "account": 42})
    await app.jobs["charge_card"].enqueue({"org": "org-0", "amount_cents": 4_999})
    await app.jobs["build_report"].enqueue({"period": "2024-Q4"})
    await app.jobs["send_reminder"].enqueue({"user": 7}, delay="4s")
    console.print("enqueued sync_crm (flaky), charge_card (declines), build_report (slow, ~3s)")
    console.print("enqueued send_reminder with delay='4s'\n")


async def all_jobs(app: App) -> list[Job]:
    """Every job in the demo's schema, through the public listing API (newest first, paged)."""
    jobs: list[Job] = []
    after: str | None = None
    while True:
        page = await app.list_jobs(limit=200, after=after)
        jobs.extend(page.jobs)
        if page.next is None:
            return jobs
        after = page.next


def error_text(job: Job) -> str:
    error = job.last_error or {}
    return f"{error.get('type', '?')}: {error.get('message', '')}" if error else ""


@dataclass
class Watch:
    """Turns successive snapshots of the jobs into a short log of the notable moments."""

    began: float
    events: list[str] = field(default_factory=list)
    seen: dict[str, tuple[str, int]] = field(default_factory=dict)
    logged: set[tuple[str, str, int]] = field(default_factory=set)

    def note(self, job: Job, kind: str, attempt: int, text: str) -> str | None:
        if (job.id, kind, attempt) in self.logged:
            return None
        self.logged.add((job.id, kind, attempt))
        line = f"{time.monotonic() - self.began:5.1f}s  {text}"
        self.events.append(line)
        return line

    def observe(self, jobs: list[Job]) -> list[str]:
        new: list[str | None] = []
        for job in jobs:
            before = self.seen.get(job.id)
            self.seen[job.id] = (job.state, job.attempt)
            if before is None or before == (job.state, job.attempt):
                continue
            tag, error = f"{job.name} attempt {job.attempt}/{job.max_attempts}", error_text(job)
            if job.state == "dead":
                new.append(self.note(job, "dead", job.attempt, f"DEAD-LETTERED {tag}: {error}"))
            elif job.last_error and job.state in ("delayed", "ready"):
                wait = max((job.run_at - job.updated_at).total_seconds(), 0)
                new.append(self.note(job, "retry", job.attempt, f"{tag} failed ({error}); retry in {wait:.2f}s"))
            elif job.last_error and job.attempt > 1:  # we polled between the failure and the re-claim
                text = f"{job.name} attempt {job.attempt - 1} failed ({error}); retried"
                new.append(self.note(job, "retry", job.attempt - 1, text))
            if before == ("delayed", 0) and job.state != "delayed":
                new.append(self.note(job, "due", 0, f"delayed job {job.name} became due"))
            if job.state == "done" and job.name != "send_email":
                new.append(self.note(job, "done", job.attempt, f"done: {tag}"))
        return [line for line in new if line is not None]


def live_view(jobs: list[Job], watch: Watch, stats: WorkerStats, with_log: bool) -> RenderableType:
    counts = {name: Counter(j.state for j in jobs if j.name == name) for name in NAMES}
    elapsed = time.monotonic() - watch.began
    table = Table(title=f"workhorse demo: one worker, {elapsed:.1f}s in", title_justify="left")
    table.add_column("job")
    for state in SHOWN_STATES:
        table.add_column(state, justify="right")
    for name in NAMES:
        table.add_row(name, *(str(counts[name][s] or "") for s in SHOWN_STATES))
    table.caption = f"worker so far: {stats.completed} done, {stats.retried} retried, {stats.dead} dead"
    for job in jobs:
        if job.name == "build_report" and job.state == "running" and job.progress:
            table.caption += f"\nbuild_report progress: {job.progress['fraction']:.0%} ({job.progress['message']})"
    if not with_log:
        return table
    log = "\n".join(watch.events[-8:]) or "(nothing notable yet)"
    return Group(table, Panel(log, title="notable events", title_align="left", expand=False))


def seconds(start: datetime | None, end: datetime | None) -> str:
    return "" if start is None or end is None else f"{(end - start).total_seconds():.2f}s"


def summarize(console: Console, jobs: list[Job], stats: WorkerStats, wall: float, schema: str) -> list[str]:
    """Print what happened; answer the expectations that were not met (empty: all good)."""
    table = Table(title="summary", title_justify="left")
    for column in ("job", "state", "attempts", "queued→end", "last run", "error"):
        table.add_column(column)
    for name in NAMES:
        group = sorted((j for j in jobs if j.name == name), key=lambda j: j.created_at)
        if len(group) == 1:  # one job: its own story
            j = group[0]
            error = error_text(j) if j.state != "done" else ""
            attempts = f"{j.attempt}/{j.max_attempts}"
            total, ran = seconds(j.created_at, j.finished_at), seconds(j.started_at, j.finished_at)
            table.add_row(name, j.state, attempts, total, ran, error)
        elif group:  # a batch: one line for all of them
            states = ", ".join(f"{n} {s}" for s, n in Counter(j.state for j in group).items())
            slowest = max(group, key=lambda j: (j.finished_at or j.updated_at) - j.created_at)
            attempts = f"{max(j.attempt for j in group)}/{group[0].max_attempts}"
            total = "≤" + seconds(slowest.created_at, slowest.finished_at)
            table.add_row(f"{name} x{len(group)}", states, attempts, total, "", "")
    console.print(table)
    by_state = Counter(j.state for j in jobs)
    console.print(
        f"totals: {len(jobs)} jobs, {by_state['done']} done, {by_state['dead']} dead, "
        f"{stats.retried} retries performed, {wall:.1f}s wall time\n"
    )

    dead = next((j for j in jobs if j.state == "dead"), None)
    console.print(WHAT_YOU_SAW.format(schema=schema, dead_id=short_id(dead.id) if dead else "?"))

    problems = []
    for name, (count, state, attempt) in EXPECTED.items():
        group = [j for j in jobs if j.name == name]
        if len(group) != count or any(j.state != state or attempt not in (None, j.attempt) for j in group):
            after = f" after {attempt} attempt(s)" if attempt else ""
            problems.append(f"expected {count} {name} job(s) {state}{after}")
    return problems


async def watch_until_settled(app: App, worker: Worker, running: asyncio.Task[Any], console: Console) -> bool:
    """Redraw the live table ~8x a second until every job is final; False at the hard cap."""
    watch, tty, finished = Watch(began=time.monotonic()), console.is_terminal, False
    with Live(console=console, auto_refresh=False) as live:
        while not finished and time.monotonic() - watch.began < HARD_CAP and not running.done():
            jobs = await all_jobs(app)
            for line in watch.observe(jobs):
                if not tty:  # no live redraw on a pipe or file: print events as they happen
                    console.print(line)
            live.update(live_view(jobs, watch, worker.stats, with_log=tty), refresh=True)
            finished = len(jobs) >= EXPECTED_JOBS and all(j.state in FINISHED_STATES for j in jobs)
            await asyncio.sleep(0 if finished else 0.125)
    console.print("" if tty else "\n")  # a pipe gets the final frame with no line end
    return finished


async def run_demo(console: Console, url: str, schema: str) -> int:
    began = time.monotonic()
    app = App(url, schema=schema)
    declare(app)
    try:
        await app.migrate()
        console.print(f"installed the workhorse tables in the demo's own schema {schema!r}\n")
        await enqueue_all(app, console)
        worker = app.worker(
            concurrency=8,  # up to 8 jobs at once per queue
            visibility_timeout="10s",  # a claim lapses 10s after its last heartbeat (worker died)
            poll_interval="250ms",
            drain_timeout="2s",  # on stop(): running jobs get 2s to finish, then go back unspent
            handle_signals=False,  # the demo owns Ctrl-C
        )
        running = asyncio.create_task(worker.run())
        try:
            finished = await watch_until_settled(app, worker, running, console)
        finally:  # on Ctrl-C too: cancelling run() alone would leave the worker claiming
            await worker.stop()
            await running  # re-raises whatever stopped the worker early
        problems = summarize(console, await all_jobs(app), worker.stats, time.monotonic() - began, schema)
        if not finished:
            problems.insert(0, f"the jobs did not all finish within {HARD_CAP:.0f}s; the worker was stopped")
        for problem in problems:
            console.print(f"[red]demo failed: {problem}[/red]")
        return 1 if problems else 0
    finally:
        await app.close()


def main(database_url: str | None = None, *, schema: str | None = None) -> int:
    """Run the demo; answer the process exit code (0: every job ended as expected)."""
    console = Console(soft_wrap=True)  # long lines wrap in the terminal, not mid-word by rich
    schema = schema or DEMO_SCHEMA
    started_here = False
    try:
        if database_url and database_url != os.environ.get(embedded.ENV_URL):
            console.print("database: the URL you passed")
        elif database_url or os.environ.get(embedded.ENV_URL):
            console.print(f"database: ${embedded.ENV_URL}")
        else:
            status = embedded.status()
            started_here = not status["running"]
            what = "starting it; the demo stops it at the end" if started_here else "already running"
            console.print(f"database: the embedded PostgreSQL under {status['home']} ({what})")
            console.print("  a real PostgreSQL server; set WORKHORSE_DATABASE_URL to use your own")
        url = embedded.resolve_database_url(database_url or None)
    except WorkhorseError as error:
        console.print(f"[red]{error.code}[/red]: {error.cause}\nfix: {error.fix}", highlight=False)
        return 1
    try:
        drop_schema(url, schema)  # the last demo's jobs: each run starts afresh
        return asyncio.run(run_demo(console, url, schema))
    except WorkhorseError as error:
        console.print(f"[red]{error.code}[/red]: {error.cause}\nfix: {error.fix}", highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("\ninterrupted: the worker was stopped")
        return 130
    finally:
        if started_here:
            embedded.stop()
            console.print(
                "stopped the embedded PostgreSQL (the demo's own cleanup; its data is kept, and the "
                "commands above start it again)"
            )
