"""Times past what the tools can read are refused where they are given (issue 27, defect 2): a
delay, a run_at, an every= period or a stats window reaching past 100 years, each with its code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext
from workhorse.durations import LONGEST, to_seconds


def _job(app: App) -> Any:
    @app.job(name="far.future", tenant="none")
    async def job(ctx: JobContext, payload: Any) -> None:
        return None

    return job


@pytest.mark.parametrize("delay", [1e12, "3000000d", 10**20, 10**400, "36526d", "9" * 400 + "d"])
def test_a_delay_past_the_bound_is_refused(delay: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _job(App(driver="memory")).build({}, delay=delay)
    assert refused.value.code == "DELAY_TOO_LONG"
    assert "100 years" in refused.value.cause and "9999" in refused.value.cause


def test_a_delay_up_to_the_bound_is_taken() -> None:
    job = _job(App(driver="memory"))
    assert job.build({}, delay="36525d").delay == LONGEST.total_seconds()


@pytest.mark.parametrize(
    "run_at", [datetime(9999, 12, 31, 23, 59, tzinfo=UTC), datetime.now(UTC) + LONGEST + timedelta(days=1)]
)
def test_a_run_at_past_the_bound_is_refused(run_at: datetime) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _job(App(driver="memory")).build({}, run_at=run_at)
    assert refused.value.code == "RUN_AT_TOO_LATE"


def test_a_run_at_within_the_bound_is_taken() -> None:
    soon = datetime.now(UTC) + LONGEST - timedelta(days=1)
    assert _job(App(driver="memory")).build({}, run_at=soon).run_at == soon


@pytest.mark.parametrize("every", ["100000000d", 10**30, "36526d"])
def test_an_every_period_past_the_bound_is_refused(every: Any) -> None:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError) as refused:

        @app.task("far.tick", every=every, tenant="none")
        async def tick(ctx: JobContext, payload: Any) -> None:
            return None

    assert refused.value.code == "TASK_EVERY_TOO_LONG"


async def test_a_stats_window_past_the_bound_is_refused(pg_app: App) -> None:
    app = pg_app  # stats are PostgreSQL's (the memory driver refuses them, POSTGRES_ONLY)
    for since in ("99999999d", 10**20):
        with pytest.raises(ConfigurationError) as refused:
            await app.admin.stats(since)
        assert refused.value.code == "STATS_WINDOW_TOO_LONG"
        with pytest.raises(ConfigurationError) as refused:
            await app.admin.snapshot(since)
        assert refused.value.code == "STATS_WINDOW_TOO_LONG"
    await app.admin.stats("36525d")


def test_a_number_too_large_for_a_float_is_refused_not_raised() -> None:
    with pytest.raises(ConfigurationError) as refused:
        to_seconds(10**400, what="timeout")
    assert refused.value.code == "CONFIG_INVALID"


def test_retry_delays_past_the_bound_are_refused() -> None:
    from workhorse import Retry

    for options in ({"max_delay": 1e12}, {"base": "3000000d"}):
        with pytest.raises(ConfigurationError) as refused:
            Retry(**options)
        assert refused.value.code == "DELAY_TOO_LONG"
