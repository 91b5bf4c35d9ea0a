"""Durations as users write them: seconds, ``timedelta`` or strings like ``"250ms"``, ``"30s"``, ``"5m"``.

Design: docs/guides/jobs.md
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from workhorse.errors import ConfigurationError

Duration = int | float | timedelta | str

LONGEST = timedelta(days=36_525)  # 100 years: the furthest ahead a delay, run_at or period may reach
LONGEST_TEXT = "100 years (36525 days)"
WHY_LONGEST = (
    "PostgreSQL would store it, but Python's datetime ends at the year 9999 and every tool that reads "
    "job times back (ls, show, export, the dashboard) reads them as datetimes"
)

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")  # no unit: seconds


def _read(value: Any) -> float:
    """``value`` in seconds: NaN when it is not a duration, infinity when too large for a float."""
    if isinstance(value, bool):
        return math.nan  # True is an int to Python, never a duration to a person
    try:
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, timedelta):
            return value.total_seconds()
        if isinstance(value, str):
            match = _PATTERN.match(value)
            return float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else math.nan
    except OverflowError:  # float(10**400)
        return math.inf if value > 0 else -math.inf
    return math.nan


def to_seconds(value: Duration, *, what: str = "duration", allow_zero: bool = True) -> float:
    """Read a duration as seconds, refusing anything that is not finite and non-negative."""
    seconds = _read(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        expected = "a positive" if not allow_zero else "a non-negative"
        raise ConfigurationError(
            cause=f"{what} expected {expected} duration (seconds, timedelta, or '250ms'/'30s'/'5m'/'2h'/'1d'), "
            f"got {_shown(value)}",
            fix=f"pass {what}='30s' or {what}=30",
        )
    return seconds


def bounded_seconds(value: Duration, *, what: str, code: str, fix: str, allow_zero: bool = True) -> float:
    """``to_seconds``, refusing with ``code`` a span longer than ``LONGEST``."""
    seconds = _read(value)
    if seconds > LONGEST.total_seconds():  # infinity too: a number too large for a float
        raise ConfigurationError(
            code=code,
            cause=f"{what} of {_shown(value)} reaches past the longest span workhorse schedules, {LONGEST_TEXT}: "
            f"{WHY_LONGEST}",
            fix=fix,
        )
    return to_seconds(value, what=what, allow_zero=allow_zero)


def check_not_too_late(when: datetime, *, what: str, fix: str) -> datetime:
    """Refuse (``RUN_AT_TOO_LATE``) a time more than ``LONGEST`` ahead of now."""
    if when - datetime.now(UTC) > LONGEST:  # clock-ok: a bound a century away; no skew matters
        raise ConfigurationError(
            code="RUN_AT_TOO_LATE",
            cause=f"{what}={when.isoformat()} is more than {LONGEST_TEXT} ahead, the furthest workhorse "
            f"schedules: {WHY_LONGEST}",
            fix=fix,
        )
    return when


def _shown(value: Any) -> str:
    huge = isinstance(value, int) and value.bit_length() > 1000  # repr() of a huge int may raise
    shown = f"an int of {value.bit_length()} bits" if huge else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
