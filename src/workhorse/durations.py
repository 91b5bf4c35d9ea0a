"""Durations as users write them: seconds, ``timedelta`` or strings like ``"250ms"``, ``"30s"``, ``"5m"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from workhorse.errors import ConfigurationError

Duration = int | float | timedelta | str

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")  # no unit: seconds


def to_seconds(value: Duration, *, what: str = "duration", allow_zero: bool = True) -> float:
    """Read a duration as seconds, refusing anything that is not finite and non-negative."""
    seconds: float
    if isinstance(value, bool):
        seconds = math.nan  # True is an int to Python, never a duration to a person
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else math.nan
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        expected = "a positive" if not allow_zero else "a non-negative"
        raise ConfigurationError(
            cause=f"{what} expected {expected} duration (seconds, timedelta, or '250ms'/'30s'/'5m'/'2h'/'1d'), "
            f"got {value!r}",
            fix=f"pass {what}='30s' or {what}=30",
        )
    return seconds
