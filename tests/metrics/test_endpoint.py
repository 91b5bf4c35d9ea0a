"""The collector and its three ways out (ASGI, WSGI, a server of its own), on both drivers: after a
known mix of jobs is enqueued and drained, every sample has its exact value."""

from __future__ import annotations

import asyncio
import gzip
import io
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from workhorse import App, JobContext, Retry
from workhorse.metrics import WorkhorseCollector, make_asgi_app, make_wsgi_app, metrics_registry, serve
from workhorse.types import WorkerInfo

DOWN = "postgresql://postgres@127.0.0.1:1/x"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def declare(app: App) -> dict[str, Any]:
    @app.job(name="ok", tenant="none", retry=Retry(attempts=1))
    async def ok(ctx: JobContext, payload: object) -> object:
        return payload

    @app.job(name="flaky", tenant="none", retry=Retry(attempts=2, base=0))
    async def flaky(ctx: JobContext, payload: object) -> str:
        if ctx.attempt == 1:
            raise ValueError("first attempt fails")
        return "ok"

    @app.job(name="bad", tenant="none", queue="mail", retry=Retry(attempts=2, base=0))
    async def bad(ctx: JobContext, payload: object) -> None:
        raise ValueError("always fails")

    @app.job(name="gone", tenant="none", queue="mail", retry=Retry(attempts=1, dead_letter=False))
    async def gone(ctx: JobContext, payload: object) -> None:
        raise ValueError("fails for good")

    @app.job(name="lost", tenant="none", queue="slow", retry=Retry(attempts=3, base=0))
    async def lost(ctx: JobContext, payload: object) -> None:
        raise AssertionError("never run by a worker here")

    return {"ok": ok, "flaky": flaky, "bad": bad, "gone": gone, "lost": lost}


async def known_mix(app: App) -> None:
    """3 ok + 1 flaky (retried once) done, 2 bad dead after a retry each, 1 gone failed; then 2 ok
    ready, 1 ok delayed, 1 lost lease taken back (running), 1 lost lease nobody took back yet
    (lapsed), queue mail paused, 1 live worker."""
    jobs = declare(app)
    for i in range(3):
        await jobs["ok"].enqueue(i)
    await jobs["flaky"].enqueue(None)
    await jobs["bad"].enqueue(1)
    await jobs["bad"].enqueue(2)
    await jobs["gone"].enqueue(None)
    stats = await app.worker(queues=["default", "mail"], handle_signals=False).run(burst=True)
    assert stats.completed == 4, stats
    await jobs["ok"].enqueue("r1")
    await jobs["ok"].enqueue("r2")
    await jobs["ok"].enqueue("later", delay="1h")
    await jobs["lost"].enqueue(None)
    claim = app.driver.claim
    assert len((await claim(worker_id="w1", wants={"slow": 1}, names=["lost"], visibility=0.05)).claimed) == 1
    await asyncio.sleep(0.2)
    assert len((await claim(worker_id="w2", wants={"slow": 1}, names=["lost"], visibility=60)).claimed) == 1
    await jobs["lost"].enqueue("again")
    assert len((await claim(worker_id="w3", wants={"slow": 1}, names=["lost"], visibility=0.05)).claimed) == 1
    await asyncio.sleep(0.2)  # its lease lapses, and no claim or rescuer runs: counted apart
    await app.admin.pause("mail", reason="smtp down")
    await app.driver.register_worker(WorkerInfo("w2", "host", 1, ["slow"], {"slow": 1}), 60)


def check_known_mix(got: Samples) -> None:
    assert got[("workhorse_up", ())] == 1
    assert got[("workhorse_workers", ())] == 1
    expected_jobs = {
        ("default", "ok"): {"ready": 2, "delayed": 1},
        ("default", "flaky"): {},
        ("mail", "bad"): {"dead": 2},
        ("mail", "gone"): {"failed": 1},
        ("slow", "lost"): {"running": 1, "lapsed": 1},
    }
    states_reported = ("ready", "delayed", "running", "lapsed", "suspended", "dead", "failed")
    for (queue, name), states in expected_jobs.items():
        for state in states_reported:
            key = ("workhorse_jobs", (("name", name), ("queue", queue), ("state", state)))
            assert got[key] == states.get(state, 0), key
    assert sum(1 for metric, _ in got if metric == "workhorse_jobs") == len(expected_jobs) * len(states_reported)

    expected_totals = {
        ("default", "ok"): {"jobs_completed": 3},
        ("default", "flaky"): {"jobs_completed": 1, "jobs_retried": 1},
        ("mail", "bad"): {"jobs_retried": 2, "jobs_dead": 2},
        ("mail", "gone"): {"jobs_failed": 1},
        ("slow", "lost"): {"lease_lost": 1},
    }
    for (queue, name), totals in expected_totals.items():
        for metric in ("jobs_completed", "jobs_retried", "jobs_failed", "jobs_dead", "lease_lost"):
            key = (f"workhorse_{metric}_total", (("name", name), ("queue", queue)))
            assert got[key] == totals.get(metric, 0), key

    def queue(metric: str, name: str) -> float:
        return got[(f"workhorse_queue_{metric}", (("queue", name),))]

    assert [queue("dead_jobs", q) for q in ("default", "mail", "slow")] == [0, 2, 0]
    assert [queue("paused", q) for q in ("default", "mail", "slow")] == [0, 1, 0]
    assert 0 < queue("oldest_ready_seconds", "default") < 60  # the two ok jobs enqueued just now
    assert queue("oldest_ready_seconds", "mail") == 0
    assert queue("oldest_ready_seconds", "slow") == 0
    assert 0.1 < queue("oldest_lapsed_seconds", "slow") < 60  # the lapsed lease, apart from running
    assert [queue("oldest_lapsed_seconds", q) for q in ("default", "mail")] == [0, 0]


@pytest.fixture
def collectors() -> Iterator[list[Any]]:
    """Whatever a test opens (collectors, apps, servers) is closed even when it fails."""
    opened: list[Any] = []
    yield opened
    for thing in reversed(opened):
        thing.close()


async def test_exposition_has_exact_values(app: App, collectors: list[Any]) -> None:
    await known_mix(app)
    registry = metrics_registry(app)
    collectors.append(registry)
    assert isinstance(registry.collector, WorkhorseCollector)
    text = (await asyncio.to_thread(generate_latest, registry)).decode()
    check_known_mix(samples(text))
    lines = text.splitlines()
    assert 'workhorse_jobs{name="bad",queue="mail",state="dead"} 2.0' in lines
    assert 'workhorse_jobs_completed_total{name="ok",queue="default"} 3.0' in lines
    assert 'workhorse_jobs_retried_total{name="bad",queue="mail"} 2.0' in lines
    assert 'workhorse_lease_lost_total{name="lost",queue="slow"} 1.0' in lines
    assert 'workhorse_queue_paused{queue="mail"} 1.0' in lines
    assert "workhorse_workers 1.0" in lines


async def test_scrapes_share_one_thread_and_follow_the_data(app: App, collectors: list[Any]) -> None:
    jobs = declare(app)
    collector = WorkhorseCollector(app)
    collectors.append(collector)

    def scrape() -> Samples:
        return samples(generate_latest(_Registry(collector)).decode())

    first = await asyncio.to_thread(scrape)
    assert first == {
        ("workhorse_up", ()): 1,
        ("workhorse_scrape_duration_seconds", ()): first[("workhorse_scrape_duration_seconds", ())],
        ("workhorse_workers", ()): 0,
    }
    await jobs["ok"].enqueue(1)
    for _ in range(3):
        got = await asyncio.to_thread(scrape)
    assert got[("workhorse_jobs", (("name", "ok"), ("queue", "default"), ("state", "ready")))] == 1
    assert sum(1 for t in threading.enumerate() if t.name == "workhorse-metrics") == 1
    collector.close()
    assert not any(t.name == "workhorse-metrics" for t in threading.enumerate())
    again = await asyncio.to_thread(scrape)  # a closed collector starts over on the next scrape
    assert again[("workhorse_up", ())] == 1


class _Registry:
    def __init__(self, collector: WorkhorseCollector) -> None:
        self.collector = collector

    def collect(self) -> Any:
        return self.collector.collect()


async def asgi_get(asgi: Any, path: str = "/metrics", headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers or [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asgi(scope, receive, send)
    start, body = sent[0], sent[1]
    assert start["type"] == "http.response.start" and body["type"] == "http.response.body"
    return start["status"], dict(start["headers"]), body["body"]


async def test_asgi_app_answers_get_metrics(app: App, collectors: list[Any]) -> None:
    await known_mix(app)
    asgi = make_asgi_app(app)
    collectors.append(asgi)
    status, headers, body = await asgi_get(asgi)
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/plain; version=0.0.4")
    check_known_mix(samples(body.decode()))
    status, headers, body = await asgi_get(asgi, headers=[(b"accept-encoding", b"gzip")])
    assert headers[b"content-encoding"] == b"gzip"
    check_known_mix(samples(gzip.decompress(body).decode()))


async def test_asgi_lifespan_shutdown_closes_the_collector(memory_app: App) -> None:
    asgi = make_asgi_app(memory_app)
    await asgi_get(asgi)
    assert any(t.name == "workhorse-metrics" for t in threading.enumerate())
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    await asgi({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not any(t.name == "workhorse-metrics" for t in threading.enumerate())


async def test_wsgi_app_answers_get_metrics(app: App, collectors: list[Any]) -> None:
    await known_mix(app)
    wsgi = make_wsgi_app(app)
    collectors.append(wsgi)
    environ: dict[str, Any] = {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    started: list[Any] = []

    def call() -> bytes:
        return b"".join(wsgi(environ, lambda status, headers, exc_info=None: started.append((status, headers))))

    body = await asyncio.to_thread(call)
    status, headers = started[0]
    assert status == "200 OK"
    assert dict(headers)["Content-Type"].startswith("text/plain; version=0.0.4")
    check_known_mix(samples(body.decode()))


async def test_serve_answers_a_real_http_request(app: App, collectors: list[Any]) -> None:
    await known_mix(app)
    server = serve(app, "127.0.0.1", 0)
    collectors.append(server)
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"

    def get() -> tuple[int, str]:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            return response.status, response.read().decode()

    status, text = await asyncio.to_thread(get)
    assert status == 200
    check_known_mix(samples(text))
    server.close()
    server.close()  # idempotent
    with pytest.raises(urllib.error.URLError, match="refused"):
        await asyncio.to_thread(get)


def test_serve_refuses_a_busy_port() -> None:
    app = App(driver="memory")
    with serve(app, "127.0.0.1", 0) as first:
        from workhorse.errors import ConfigurationError

        with pytest.raises(ConfigurationError) as refused:
            serve(app, "127.0.0.1", first.port)
    assert refused.value.code == "METRICS_BIND_FAILED"
    assert str(first.port) in refused.value.cause


def test_a_database_that_is_down_scrapes_as_up_0(caplog: pytest.LogCaptureFixture) -> None:
    app = App(DOWN, schema="nowhere")
    collector = WorkhorseCollector(app, timeout=1)
    try:
        with caplog.at_level(logging.WARNING, logger="workhorse.metrics"):
            for _ in range(2):
                got = samples(generate_latest(_Registry(collector)).decode())
                assert got[("workhorse_up", ())] == 0
                assert 0 < got[("workhorse_scrape_duration_seconds", ())] < 5
                assert set(got) == {("workhorse_up", ()), ("workhorse_scrape_duration_seconds", ())}
        assert collector.last_error is not None
        warnings = [r for r in caplog.records if r.name == "workhorse.metrics"]
        assert len(warnings) == 1 and "workhorse_up 0" in warnings[0].getMessage()  # once, not per scrape
    finally:
        collector.close()


def test_a_server_over_a_database_that_is_down_still_answers() -> None:
    with (
        serve(App(DOWN, schema="nowhere"), "127.0.0.1", 0, timeout=0.5) as server,
        urllib.request.urlopen(server.url, timeout=10) as response,
    ):
        text = response.read().decode()
    assert samples(text)[("workhorse_up", ())] == 0


def test_a_snapshot_left_waiting_unwinds_before_its_loop_closes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A scrape past its timeout leaves its snapshot waiting on a database that does not answer;
    closing the collector cancels it and lets it unwind on its loop. Destroyed pending with the
    closed loop instead, it unwound later in the garbage collector, raising there ("Event loop is
    closed") inside whatever test ran next."""
    import gc
    import sys

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        url = f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/x"
        collector = WorkhorseCollector(App(url, schema="nowhere"), timeout=0.3)
        assert samples(generate_latest(_Registry(collector)).decode())[("workhorse_up", ())] == 0
        collector.close()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []  # "Task was destroyed ..."
    assert [str(u.exc_value) for u in unraisable] == []
