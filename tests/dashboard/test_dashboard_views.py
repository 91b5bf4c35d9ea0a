"""The dashboard's pure parts: how times and numbers read, the jobs page's query parameters as
`ls` reads them, the charts' markup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workhorse.dashboard.charts import Minute, bars, hour_of, state_mix
from workhorse.dashboard.views import PAGE_SIZE, ago, bulk_verbs, job_filters, progress_fraction, span
from workhorse.errors import ConfigurationError

NOW = datetime(2026, 1, 31, 9, 30, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (45, "45s"),
        (60, "1m"),
        (250, "4m 10s"),
        (7500, "2h 5m"),
        (3 * 86400 + 4 * 3600, "3d 4h"),
    ],
)
def test_spans_read_in_at_most_two_units(seconds: float, shown: str) -> None:
    assert span(seconds) == shown


def test_ago_and_in() -> None:
    assert ago(NOW - timedelta(seconds=184), NOW) == "3m 4s ago"
    assert ago(NOW + timedelta(minutes=5), NOW) == "in 5m"
    assert ago(NOW, NOW) == "now" and ago(None, NOW) == "-"


def test_the_jobs_filters_read_as_ls_reads_its_options() -> None:
    f = job_filters({"state": "dead", "queue": "emails", "id-prefix": "0190", "created_from": "2h", "tenant": " "}, NOW)
    assert f.list_arguments() == {
        "state": "dead",
        "queue": "emails",
        "name": None,
        "tenant": None,  # an empty field is no filter
        "id_prefix": "0190",
        "created_from": NOW - timedelta(hours=2),
        "created_to": None,
        "payload": None,
        "error": None,
        "limit": PAGE_SIZE,
    }
    searching = job_filters({"payload": "customer.id=7", "error": " timed out "}).list_arguments()
    assert (searching["payload"], searching["error"]) == ({"customer": {"id": 7}}, "timed out")
    assert f.query(after="x") == {
        "state": "dead",
        "queue": "emails",
        "id_prefix": "0190",
        "created_from": "2h",
        "after": "x",
    }
    assert job_filters({"created_to": "2026-01-31T09:00"}).created_to == datetime(2026, 1, 31, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("params", "code"),
    [({"state": "gone"}, "STATE_UNKNOWN"), ({"created_from": "yesterday"}, "TIME_INVALID")],
)
def test_bad_filters_are_refused_with_the_codes_ls_answers(params: dict[str, str], code: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        job_filters(params)
    assert refused.value.code == code


def test_bulk_verbs_follow_the_state() -> None:
    assert bulk_verbs("dead") == ["requeue"]
    assert bulk_verbs("ready") == ["cancel", "promote"]
    assert bulk_verbs("running") == ["cancel"]
    assert bulk_verbs(None) == []


def test_progress_fraction() -> None:
    assert progress_fraction({"done": 2, "total": 8}) == 0.25
    assert progress_fraction({"fraction": 1.5}) == 1.0
    assert progress_fraction({"message": "working"}) is None and progress_fraction(None) is None


def test_an_hour_of_minutes_oldest_first() -> None:
    rows = [
        (NOW.replace(second=0, microsecond=0), "emails", 5, 1),
        (NOW.replace(second=0, microsecond=0) - timedelta(minutes=59), "emails", 2, 0),
        (NOW.replace(second=0, microsecond=0) - timedelta(minutes=60), "emails", 99, 99),  # outside the hour
        (NOW.replace(second=0, microsecond=0), "other", 7, 7),
    ]
    hour = hour_of(rows, "emails", NOW)
    assert len(hour) == 60 and hour[-1] == Minute(5, 1) and hour[0] == Minute(2, 0)
    assert sum(m.completed for m in hour) == 7


def test_charts_are_numbers_only() -> None:
    drawn = str(bars([Minute(3, 1), Minute(0, 0), Minute(10, 0)]))
    assert drawn.startswith("<svg") and drawn.count("<rect") == 3
    assert str(bars([Minute()] * 60)).count("<rect") == 0  # a quiet hour: the baseline only
    mix = str(state_mix([("ready", 3), ("dead", 1), ("<script>", 5)]))
    assert "<script>" not in mix and mix.count("<rect") == 3  # the empty track, ready, dead
