"""``app.admin.counter_minutes``: the per-minute counter rows the dashboard's charts draw,
summing to what ``snapshot`` counts."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from test_counters import EXPECTED_COUNTERS, drain_mix

from workhorse import App, ConfigurationError


async def test_the_minutes_of_the_last_hour_sum_to_the_counters(app: App) -> None:
    await drain_mix(app)
    minutes = await app.admin.counter_minutes("1h")
    assert minutes, "the settles of this minute are in the minute tier"
    now = (await app.admin.snapshot(60)).now
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for bucket, row in minutes:
        assert bucket.second == 0 and bucket.microsecond == 0
        assert 0 <= (now - bucket).total_seconds() < 3600
        assert row.name == ""  # summed over the queue's names
        for i, value in enumerate((row.completed, row.retried, row.failed, row.dead, row.lapsed)):
            sums[row.queue][i] += value
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for c in EXPECTED_COUNTERS:
        for i, value in enumerate((c.completed, c.retried, c.failed, c.dead, c.lapsed)):
            expected[c.queue][i] += value
    assert dict(sums) == dict(expected) == {"mix": [4, 2, 1, 2, 0]}
    assert [b for b, _ in minutes] == sorted(b for b, _ in minutes)  # oldest first


async def test_an_empty_store_has_no_minutes(app: App) -> None:
    assert await app.admin.counter_minutes("10m") == []


@pytest.mark.parametrize("since", ["3h", "0s", -5, "soon"])
async def test_a_window_past_the_minute_tier_or_no_window_is_refused(app: App, since: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.counter_minutes(since)
    assert refused.value.code in ("WINDOW_INVALID", "DURATION_INVALID", "CONFIG_INVALID")
