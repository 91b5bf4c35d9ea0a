"""The pure part: one snapshot in, metric families out (no database, no thread)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workhorse import App, ConfigurationError
from workhorse.metrics import WorkhorseCollector, families, render, to_document
from workhorse.types import CounterSum, QueuePause, Snapshot, StateCount

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def snapshot() -> Snapshot:
    return Snapshot(
        now=NOW,
        states=[
            StateCount("default", "a", "ready", 3, NOW - timedelta(seconds=90)),
            StateCount("default", "b", "ready", 1, NOW - timedelta(seconds=30)),
            StateCount("default", "b", "running", 2, NOW - timedelta(hours=1)),
            StateCount("default", "b", "lapsed", 1, NOW - timedelta(seconds=45)),  # the lapse, 45 s ago
            StateCount("mail", "m", "dead", 4, NOW - timedelta(days=1)),
            StateCount("mail", "m", "delayed", 1, NOW + timedelta(hours=1)),
            StateCount("late", "x", "ready", 1, NOW + timedelta(seconds=5)),  # clock skew: never negative
        ],
        counters=[
            CounterSum("default", "a", completed=10, retried=2, lapsed=1),
            CounterSum("gone", "old", completed=7, failed=1, dead=3),
        ],
        paused=[QueuePause("mail", NOW), QueuePause("idle", NOW)],
        workers=3,
    )


def test_every_sample_of_a_snapshot() -> None:
    got = samples(render(families(snapshot(), 0.25)))
    assert got[("workhorse_up", ())] == 1
    assert got[("workhorse_scrape_duration_seconds", ())] == 0.25
    assert got[("workhorse_workers", ())] == 3

    def jobs(queue: str, name: str, state: str) -> float:
        return got[("workhorse_jobs", (("name", name), ("queue", queue), ("state", state)))]

    assert jobs("default", "a", "ready") == 3
    assert jobs("default", "b", "running") == 2
    assert jobs("default", "b", "lapsed") == 1  # a lapsed lease counts apart from the live ones
    assert jobs("default", "a", "lapsed") == 0
    assert jobs("mail", "m", "dead") == 4
    assert jobs("mail", "m", "delayed") == 1
    # every state of a known (queue, name) is reported, zeros included: a series never vanishes
    assert jobs("default", "a", "suspended") == 0
    assert jobs("gone", "old", "ready") == 0  # known from its counters only
    assert sum(1 for name, _ in got if name == "workhorse_jobs") == 5 * 7

    def queue(metric: str, name: str) -> float:
        return got[(f"workhorse_queue_{metric}", (("queue", name),))]

    assert queue("oldest_ready_seconds", "default") == 90  # the oldest of the queue's names
    assert queue("oldest_ready_seconds", "mail") == 0  # nothing ready
    assert queue("oldest_ready_seconds", "late") == 0
    assert queue("oldest_lapsed_seconds", "default") == 45  # how long ago the oldest lease lapsed
    assert queue("oldest_lapsed_seconds", "mail") == 0
    assert queue("dead_jobs", "mail") == 4
    assert queue("dead_jobs", "default") == 0
    assert queue("paused", "mail") == 1
    assert queue("paused", "idle") == 1  # a paused queue with no jobs still shows
    assert queue("paused", "default") == 0

    def total(metric: str, queue: str, name: str) -> float:
        return got[(f"workhorse_{metric}_total", (("name", name), ("queue", queue)))]

    assert total("jobs_completed", "default", "a") == 10
    assert total("jobs_retried", "default", "a") == 2
    assert total("lease_lost", "default", "a") == 1
    assert total("jobs_failed", "gone", "old") == 1
    assert total("jobs_dead", "gone", "old") == 3
    assert total("jobs_dead", "default", "a") == 0
    assert ("workhorse_jobs_completed_total", (("name", "m"), ("queue", "mail"))) not in got  # no counters yet


def test_types_and_the_literal_exposition() -> None:
    text = render(families(snapshot(), 0.0))
    assert "# TYPE workhorse_jobs gauge" in text
    assert "# TYPE workhorse_jobs_completed_total counter" in text
    assert "# TYPE workhorse_lease_lost_total counter" in text
    lines = text.splitlines()  # prometheus_client writes label names sorted
    assert 'workhorse_jobs{name="m",queue="mail",state="dead"} 4.0' in lines
    assert 'workhorse_queue_oldest_ready_seconds{queue="default"} 90.0' in lines
    assert 'workhorse_jobs_completed_total{name="a",queue="default"} 10.0' in lines
    assert "_created" not in text


def test_a_failed_scrape_reports_up_0_and_nothing_made_up() -> None:
    text = render(families(None, 1.5))
    assert samples(text) == {("workhorse_up", ()): 0, ("workhorse_scrape_duration_seconds", ()): 1.5}


def test_the_json_document_carries_the_same_samples() -> None:
    document = to_document(families(snapshot(), 0.0))
    by_name = {m["name"]: m for m in document["metrics"]}
    assert by_name["workhorse_up"]["samples"] == [{"labels": {}, "value": 1}]
    assert by_name["workhorse_jobs_dead_total"]["type"] == "counter"
    assert {"labels": {"queue": "gone", "name": "old"}, "value": 3} in by_name["workhorse_jobs_dead_total"]["samples"]
    assert by_name["workhorse_queue_paused"]["samples"][0] == {"labels": {"queue": "default"}, "value": 0}


def test_describe_names_every_family_without_a_scrape() -> None:
    from workhorse import App

    threads = threading.active_count()
    collector = WorkhorseCollector(App(driver="memory"))
    names = {m.name for m in collector.describe()}
    assert names == {
        "workhorse_up",
        "workhorse_scrape_duration_seconds",
        "workhorse_jobs",
        "workhorse_queue_oldest_ready_seconds",
        "workhorse_queue_oldest_lapsed_seconds",
        "workhorse_queue_dead_jobs",
        "workhorse_queue_paused",
        "workhorse_workers",
        "workhorse_jobs_completed",
        "workhorse_jobs_retried",
        "workhorse_jobs_failed",
        "workhorse_jobs_dead",
        "workhorse_lease_lost",
    }
    assert threading.active_count() == threads  # describing reads nothing and starts no thread


@pytest.mark.parametrize("timeout", [0, -1, 301, True, "5s", None])
def test_a_collector_refuses_a_timeout_outside_0_to_300_seconds(timeout: object) -> None:
    with pytest.raises(ConfigurationError) as refused:
        WorkhorseCollector(App(driver="memory"), timeout=timeout)  # type: ignore[arg-type]
    assert refused.value.code == "METRICS_TIMEOUT_INVALID"
    assert repr(timeout) in refused.value.cause and "timeout=" in refused.value.fix
