"""Prometheus metrics for workhorse, read from ``app.admin.snapshot()`` at every scrape.

Nothing is counted in this process: every number comes from the database (the counters the settle
statement moves, the jobs by state, the pauses and the worker registry), so one endpoint anywhere
reports the whole fleet, and a restart loses nothing. Scrape one endpoint per database, not one
per worker: every endpoint answers the same numbers.

Public names:

``WorkhorseCollector(app, timeout=5.0)``
    A ``prometheus_client`` collector. Register it in a registry of your own
    (``REGISTRY.register(WorkhorseCollector(app))``); ``close()`` releases its thread and connections.
``metrics_registry(app, timeout=5.0)``
    A fresh ``MetricsRegistry`` (a ``CollectorRegistry``) holding only a ``WorkhorseCollector`` of
    ``app``: ``generate_latest(registry)``, ``registry.collector``, ``registry.close()``.
``make_asgi_app(app, timeout=5.0)``
    A ``MetricsASGIApp`` answering the exposition on any path (mount it at ``/metrics`` in
    FastAPI or Starlette: ``api.mount("/metrics", make_asgi_app(app))``). The scrape runs off the
    server's event loop. ``close()`` (or an ASGI lifespan shutdown, when it is the whole app)
    releases its thread and connections.
``make_wsgi_app(app, timeout=5.0)``
    A ``MetricsWSGIApp``, the same for WSGI (Flask, Django): e.g. werkzeug's
    ``DispatcherMiddleware(flask_app.wsgi_app, {"/metrics": make_wsgi_app(app)})``.
``serve(app, host, port, timeout=5.0)``
    Start a threaded HTTP server (``prometheus_client.start_http_server``) and answer a
    ``MetricsServer``: ``url``, ``port`` (the real one when ``port=0``), ``close()``; also a
    context manager. A refused bind raises ``ConfigurationError`` (METRICS_BIND_FAILED).
``families(snapshot, duration)``
    The metric families of one snapshot (``None``: a failed scrape), a pure function.
``render(families)`` / ``to_document(families)``
    The exposition text, or a JSON-ready document of the same samples.

The metrics (labels ``queue``: the job's queue, ``name``: the job name):

- ``workhorse_up`` (gauge): 1 when the scrape read the database, else 0.
- ``workhorse_scrape_duration_seconds`` (gauge): how long the snapshot took.
- ``workhorse_jobs{queue,name,state}`` (gauge): jobs now in ready, delayed, running, lapsed,
  suspended, dead and failed (done and cancelled are history: the counters count them). ``lapsed``
  is no stored state: the running jobs whose lease lapsed (their worker died or froze) that no
  claim or rescue recovered yet, counted apart from ``running`` (live leases).
- ``workhorse_queue_oldest_ready_seconds{queue}`` (gauge): how long the oldest due job has waited
  to be claimed; 0 when nothing is due.
- ``workhorse_queue_oldest_lapsed_seconds{queue}`` (gauge): how long ago the lease of the oldest
  lapsed running job lapsed; 0 when none has.
- ``workhorse_queue_dead_jobs{queue}`` (gauge): dead-lettered jobs kept.
- ``workhorse_queue_paused{queue}`` (gauge): 1 while the queue is paused.
- ``workhorse_workers`` (gauge): live worker processes in the registry.
- ``workhorse_jobs_completed_total``, ``workhorse_jobs_retried_total``,
  ``workhorse_jobs_failed_total``, ``workhorse_jobs_dead_total``, ``workhorse_lease_lost_total``
  (counters, ``{queue,name}``): attempt outcomes of all time, from the database's counters.

A failed scrape (database down, schema missing, slower than ``timeout``) is logged on
``workhorse.metrics`` and answers ``workhorse_up 0`` and the duration only; it never raises into
the HTTP server. ``prometheus_client`` calls ``collect()`` synchronously, so the collector runs
the app's async snapshot on ONE long-lived background thread with its own event loop: the app's
connection pool for that loop is opened once and reused by every scrape.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import gzip
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from workhorse.errors import ConfigurationError

if TYPE_CHECKING:
    from workhorse.app import App
    from workhorse.types import Snapshot

__all__ = [
    "DEFAULT_TIMEOUT",
    "MetricsASGIApp",
    "MetricsRegistry",
    "MetricsServer",
    "MetricsWSGIApp",
    "WorkhorseCollector",
    "families",
    "make_asgi_app",
    "make_wsgi_app",
    "metrics_registry",
    "render",
    "serve",
    "to_document",
]

log = logging.getLogger("workhorse.metrics")

DEFAULT_TIMEOUT: Final = 5.0  # seconds; under Prometheus' default scrape_timeout of 10s
SHUTDOWN_GRACE: Final = 5.0  # seconds a stopping loop gives its cancelled snapshots to unwind
# 'lapsed' is no stored state: running jobs whose lease lapsed, counted apart from 'running'.
JOB_STATES: Final = ("ready", "delayed", "running", "lapsed", "suspended", "dead", "failed")
COUNTERS: Final = (
    ("workhorse_jobs_completed_total", "completed", "Attempts that completed (job done)."),
    ("workhorse_jobs_retried_total", "retried", "Attempts that failed and were scheduled to run again."),
    ("workhorse_jobs_failed_total", "failed", "Jobs that failed for good without a dead-letter queue."),
    ("workhorse_jobs_dead_total", "dead", "Jobs dead-lettered (attempts spent, a terminal error, or a lease "
     "that lapsed on the final attempt)."),
    ("workhorse_lease_lost_total", "lapsed", "Leases that lapsed and were taken back by a claim "
     "(the worker died or stalled past its visibility timeout)."),
)  # fmt: skip


# -- the numbers ----------------------------------------------------------------------------------


def families(snapshot: Snapshot | None, duration: float) -> list[Metric]:
    """The metric families of one scrape. ``snapshot`` None means the scrape failed: only
    ``workhorse_up 0`` and the duration are reported (no stale or made-up zeros)."""
    up = GaugeMetricFamily("workhorse_up", "1 when the last scrape read the database, 0 when it failed.")
    up.add_metric([], 0.0 if snapshot is None else 1.0)
    took = GaugeMetricFamily("workhorse_scrape_duration_seconds", "Seconds the scrape's snapshot took.")
    took.add_metric([], duration)
    if snapshot is None:
        return [up, took]

    pairs: set[tuple[str, str]] = set()
    counts: dict[tuple[str, str, str], int] = {}
    oldest: dict[str, float] = {}
    lapsed_since: dict[str, float] = {}
    dead: dict[str, int] = {}
    for c in snapshot.states:
        pairs.add((c.queue, c.name))
        counts[c.queue, c.name, c.state] = counts.get((c.queue, c.name, c.state), 0) + c.count
        if c.state == "dead":
            dead[c.queue] = dead.get(c.queue, 0) + c.count
        if c.state == "ready" and c.count and c.oldest_run_at is not None:
            waited = max(0.0, (snapshot.now - c.oldest_run_at).total_seconds())
            oldest[c.queue] = max(oldest.get(c.queue, 0.0), waited)
        if c.state == "lapsed" and c.count and c.oldest_run_at is not None:
            waited = max(0.0, (snapshot.now - c.oldest_run_at).total_seconds())
            lapsed_since[c.queue] = max(lapsed_since.get(c.queue, 0.0), waited)
    pairs.update((s.queue, s.name) for s in snapshot.counters)
    paused = {p.queue for p in snapshot.paused}
    queues = sorted({q for q, _ in pairs} | paused)

    jobs = GaugeMetricFamily(
        "workhorse_jobs",
        "Jobs now in each state (done and cancelled are history: see the *_total counters). 'running' "
        "counts live leases; 'lapsed' the running jobs whose lease lapsed that no claim or rescue recovered yet.",
        labels=["queue", "name", "state"],
    )
    for queue, name in sorted(pairs):
        for state in JOB_STATES:
            jobs.add_metric([queue, name, state], float(counts.get((queue, name, state), 0)))
    age = GaugeMetricFamily(
        "workhorse_queue_oldest_ready_seconds",
        "Seconds the oldest due (ready) job of the queue has waited to be claimed; 0 when none is due.",
        labels=["queue"],
    )
    lapse_age = GaugeMetricFamily(
        "workhorse_queue_oldest_lapsed_seconds",
        "Seconds since the lease of the queue's oldest lapsed running job lapsed (its worker stopped "
        "renewing it); 0 when none has.",
        labels=["queue"],
    )
    dead_jobs = GaugeMetricFamily(
        "workhorse_queue_dead_jobs", "Dead-lettered jobs kept in the queue.", labels=["queue"]
    )
    is_paused = GaugeMetricFamily(
        "workhorse_queue_paused", "1 while the queue is paused (no claim takes from it), else 0.", labels=["queue"]
    )
    for queue in queues:
        age.add_metric([queue], oldest.get(queue, 0.0))
        lapse_age.add_metric([queue], lapsed_since.get(queue, 0.0))
        dead_jobs.add_metric([queue], float(dead.get(queue, 0)))
        is_paused.add_metric([queue], 1.0 if queue in paused else 0.0)
    workers = GaugeMetricFamily("workhorse_workers", "Live worker processes in the registry.")
    workers.add_metric([], float(snapshot.workers))

    out: list[Metric] = [up, took, jobs, age, lapse_age, dead_jobs, is_paused, workers]
    sums = {(s.queue, s.name): s for s in snapshot.counters}
    for metric, field, help_text in COUNTERS:
        counter = CounterMetricFamily(metric, help_text, labels=["queue", "name"])
        for key in sorted(sums):
            counter.add_metric(list(key), float(getattr(sums[key], field)))
        out.append(counter)
    return out


class _Fixed:
    """A collector answering families already built (for rendering one snapshot)."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render(metrics: Iterable[Metric]) -> str:
    """The Prometheus text exposition (format 0.0.4) of ``metrics``."""
    return generate_latest(_Fixed(metrics)).decode()


def to_document(metrics: Iterable[Metric]) -> dict[str, Any]:
    """The same samples as ``render``, as a JSON-ready document:
    ``{"metrics": [{"name", "type", "help", "samples": [{"labels", "value"}]}]}``."""
    out = []
    for metric in metrics:
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        samples = [
            {"labels": dict(s.labels), "value": int(s.value) if float(s.value).is_integer() else s.value}
            for s in metric.samples
            if s.name == name
        ]
        out.append({"name": name, "type": metric.type, "help": metric.documentation, "samples": samples})
    return {"metrics": out}


# -- the collector --------------------------------------------------------------------------------


class _LoopThread:
    """One daemon thread running one event loop forever, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, make: Callable[[], Awaitable[Any]]) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=self._run, args=(loop,), name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return asyncio.run_coroutine_threadsafe(_await(make), self._loop)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # A snapshot still waiting when the loop stops (one past its timeout, on a database
            # that does not answer) is cancelled and let unwind here, as asyncio.run does: closed
            # with the loop, it would be destroyed pending and unwind later, in the garbage
            # collector, against a closed loop.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=SHUTDOWN_GRACE))
        finally:
            loop.close()

    def stop(self, last: Callable[[], Awaitable[Any]] | None, timeout: float) -> None:
        """Run ``last`` on the loop (bounded by ``timeout``), then stop it and join the thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        if last is not None:
            try:
                asyncio.run_coroutine_threadsafe(_await(last), loop).result(timeout)
            except Exception as error:
                log.warning("closing the metrics connections failed: %s", error)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)


async def _await(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


_OPEN: weakref.WeakSet[WorkhorseCollector] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - interpreter exit
    for collector in list(_OPEN):
        collector.close()


class WorkhorseCollector:
    """A ``prometheus_client`` collector over ``app.admin.snapshot()`` (all-time counters).

    Each ``collect()`` reads one snapshot on the collector's own background event loop, waiting
    at most ``timeout`` seconds; a failure is logged and reported as ``workhorse_up 0``."""

    def __init__(self, app: App, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
            raise ConfigurationError(
                code="METRICS_TIMEOUT_INVALID",
                cause=f"timeout expected seconds between 0 and 300, got {timeout!r}",
                fix=f"WorkhorseCollector(app, timeout={DEFAULT_TIMEOUT})   # below your scrape_timeout",
            )
        self.app = app
        self.timeout = float(timeout)
        self._loop = _LoopThread("workhorse-metrics")
        self._failing = False
        self.last_error: BaseException | None = None

    def describe(self) -> Iterable[Metric]:
        """The families this collector answers (a registry learns the names without a scrape)."""
        names = families(None, 0.0)
        return [*names, *_empty_families()]

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        snapshot = self.snapshot()
        return families(snapshot, time.perf_counter() - started)

    def snapshot(self) -> Snapshot | None:
        """One snapshot, or None (logged, kept in ``last_error``) when it failed or timed out."""
        _OPEN.add(self)
        future = self._loop.submit(lambda: self.app.admin.snapshot(None))
        try:
            snapshot: Snapshot = future.result(self.timeout)
        except Exception as error:
            failure: BaseException = error
            if not future.done():  # still running: give up on it (cancels the task on the loop)
                future.cancel()
                failure = TimeoutError(f"the snapshot took longer than {self.timeout:g}s")
            self.last_error = failure
            if not self._failing:
                log.warning("metrics scrape failed, reporting workhorse_up 0: %s", failure)
            else:
                log.debug("metrics scrape failed again: %s", failure)
            self._failing = True
            return None
        if self._failing:
            log.info("metrics scrape recovered")
        self._failing, self.last_error = False, None
        return snapshot

    def close(self, timeout: float = 5.0) -> None:
        """Close the app's connections of the background loop and stop its thread. A later
        ``collect()`` starts a new one."""
        _OPEN.discard(self)
        self._loop.stop(self.app.close, timeout)


def _empty_families() -> list[Metric]:
    from workhorse.types import Snapshot

    empty = Snapshot(now=datetime(1970, 1, 1, tzinfo=UTC), states=[], counters=[], paused=[], workers=0)
    return families(empty, 0.0)[2:]


class MetricsRegistry(CollectorRegistry):
    """A ``CollectorRegistry`` holding one ``WorkhorseCollector`` (``collector``); ``close()``
    closes it."""

    def __init__(self, collector: WorkhorseCollector) -> None:
        super().__init__(auto_describe=False)
        self.collector = collector
        self.register(collector)

    def close(self) -> None:
        self.collector.close()


def metrics_registry(app: App, *, timeout: float = DEFAULT_TIMEOUT) -> MetricsRegistry:
    """A new registry holding one ``WorkhorseCollector`` of ``app`` (and nothing else)."""
    return MetricsRegistry(WorkhorseCollector(app, timeout=timeout))


# -- ASGI / WSGI ----------------------------------------------------------------------------------

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
StartResponse = Callable[..., Any]


class MetricsASGIApp:
    """The ASGI app ``make_asgi_app`` answers. ``close()`` (or an ASGI lifespan shutdown)
    releases the collector's thread and connections."""

    def __init__(self, app: App, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.registry = metrics_registry(app, timeout=timeout)
        self.collector = self.registry.collector

    def close(self) -> None:
        self.collector.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await asyncio.to_thread(self.close)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            status, body, response = 405, b"Method Not Allowed\n", [(b"allow", b"GET, HEAD")]
        else:
            params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            status, body, response = 200, *(await asyncio.to_thread(self._exposition, headers, params))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*response, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    def _exposition(
        self, headers: Mapping[str, str], params: Mapping[str, list[str]]
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        registry: Collector = self.registry
        if "name[]" in params:
            registry = self.registry.restricted_registry(params["name[]"])
        body = encoder(registry)
        response = [(b"content-type", content_type.encode())]
        if "gzip" in headers.get("accept-encoding", ""):
            body = gzip.compress(body)
            response.append((b"content-encoding", b"gzip"))
        return body, response


class MetricsWSGIApp:
    """The WSGI app ``make_wsgi_app`` answers (``prometheus_client``'s, over our registry)."""

    def __init__(self, app: App, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.registry = metrics_registry(app, timeout=timeout)
        self.collector = self.registry.collector
        self._wsgi = prometheus_client.make_wsgi_app(self.registry)

    def close(self) -> None:
        self.collector.close()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body: Iterable[bytes] = self._wsgi(environ, start_response)
        return body


def make_asgi_app(app: App, *, timeout: float = DEFAULT_TIMEOUT) -> MetricsASGIApp:
    """An ASGI app serving ``app``'s metrics on any path (mount it at ``/metrics``)."""
    return MetricsASGIApp(app, timeout=timeout)


def make_wsgi_app(app: App, *, timeout: float = DEFAULT_TIMEOUT) -> MetricsWSGIApp:
    """A WSGI app serving ``app``'s metrics on any path (mount it at ``/metrics``)."""
    return MetricsWSGIApp(app, timeout=timeout)


# -- a server of its own --------------------------------------------------------------------------


@dataclass
class MetricsServer:
    """A running ``serve()``: the HTTP server thread and the collector behind it."""

    host: str
    port: int
    collector: WorkhorseCollector
    _httpd: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop answering, close the socket, then the collector's connections. Idempotent."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)
        self.collector.close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def serve(app: App, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT) -> MetricsServer:
    """Serve ``app``'s metrics over HTTP on ``host:port`` (``port=0``: any free port) from
    daemon threads, answering at once. ``close()`` the answer to stop it."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(
            code="METRICS_ADDRESS_INVALID",
            cause=f"port expected a whole number from 0 to 65535, got {port!r}",
            fix="workhorse metrics --serve :9464",
        )
    registry = metrics_registry(app, timeout=timeout)
    try:
        httpd, thread = prometheus_client.start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise ConfigurationError(
            code="METRICS_BIND_FAILED",
            cause=f"cannot listen on {host}:{port}: {error.strerror or error}",
            fix="pick a free port and an address of this machine: workhorse metrics --serve 0.0.0.0:9464",
        ) from error
    bound_host, bound_port = httpd.server_address[:2]
    return MetricsServer(str(bound_host), int(bound_port), registry.collector, httpd, thread)
