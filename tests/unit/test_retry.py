"""The retry policy and durations: pure functions, exact numbers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from workhorse import ConfigurationError, Retry, RetryAfter, TerminalError
from workhorse.durations import to_seconds
from workhorse.retry import decide


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5, 5.0),
        (0.25, 0.25),
        ("250ms", 0.25),
        ("30s", 30.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert to_seconds(value) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["5 minutes", "-1s", -1, float("nan"), float("inf"), True, None, "1w"])
def test_bad_durations_are_refused(value: object) -> None:
    with pytest.raises(ConfigurationError) as refused:
        to_seconds(value, what="timeout")  # type: ignore[arg-type]
    assert "timeout" in refused.value.cause and refused.value.fix


def test_backoff_doubles_and_is_capped() -> None:
    policy = Retry(attempts=10, base=2, max_delay=30, jitter=False)
    assert [policy.backoff(n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]


def test_jitter_stays_within_half_to_full() -> None:
    policy = Retry(attempts=10, base=8, max_delay=100)
    for _ in range(200):
        assert 4 <= policy.backoff(1) <= 8


def test_decisions() -> None:
    policy = Retry(attempts=3, base=1, max_delay=60, jitter=False)
    assert decide(policy, 1, ValueError()).verdict == "retry"
    assert decide(policy, 3, ValueError()).verdict == "dead"
    assert decide(policy, 1, TerminalError("no")).verdict == "dead"
    stated = decide(policy, 1, RetryAfter(600))
    assert (stated.verdict, stated.delay) == ("retry", 60)
    assert decide(Retry(attempts=1, dead_letter=False), 1, ValueError()).verdict == "failed"


@pytest.mark.parametrize("attempts", [0, -1, 1.5, True, "3"])
def test_retry_refuses_bad_attempts(attempts: object) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Retry(attempts=attempts)  # type: ignore[arg-type]
    assert refused.value.code == "CONFIG_INVALID"


def test_retry_after_refuses_bad_seconds() -> None:
    with pytest.raises(ConfigurationError):
        RetryAfter(float("nan"))
    with pytest.raises(ConfigurationError):
        RetryAfter(-5)
