"""The retry policy and the decision it makes after an attempt fails. Pure: no I/O, no clock."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from workhorse.durations import Duration, bounded_seconds
from workhorse.errors import ConfigurationError, RetryAfter, TerminalError


@dataclass(frozen=True, init=False)
class Retry:
    """How often a job runs and how long it waits between runs.

    ``attempts`` counts every run (1 = no retry). The n-th retry waits ``base * 2**(n-1)``
    seconds, capped by ``max_delay``; with ``jitter`` the wait is drawn uniformly from
    ``[delay/2, delay]`` so jobs failing together do not retry together. When attempts are spent
    the job is dead-lettered (state ``dead``), or ends ``failed`` with ``dead_letter=False``.
    """

    attempts: int
    base: float
    max_delay: float
    jitter: bool
    dead_letter: bool
    _random: random.Random = field(repr=False, compare=False)

    def __init__(
        self,
        attempts: int = 5,
        base: Duration = 1.0,
        max_delay: Duration = 3600.0,
        jitter: bool = True,
        dead_letter: bool = True,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                cause=f"Retry.attempts expected a whole number >= 1 (every run counts), got {attempts!r}",
                fix="Retry(attempts=5)   # or attempts=1 for no retry",
            )
        fix = "Retry(base='1s', max_delay='1h')   # each at most 36525 days"
        base_s = bounded_seconds(base, what="Retry.base", code="DELAY_TOO_LONG", fix=fix)
        max_s = bounded_seconds(max_delay, what="Retry.max_delay", code="DELAY_TOO_LONG", fix=fix)
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "base", base_s)
        object.__setattr__(self, "max_delay", max_s)
        object.__setattr__(self, "jitter", bool(jitter))
        object.__setattr__(self, "dead_letter", bool(dead_letter))
        object.__setattr__(self, "_random", random.Random())

    def backoff(self, retry_number: int) -> float:
        """Seconds to wait before retry number ``retry_number`` (1 = the first retry)."""
        exponent = min(max(retry_number - 1, 0), 62)
        delay = min(self.base * math.pow(2, exponent), self.max_delay)
        if self.jitter and delay > 0:
            delay = self._random.uniform(delay / 2, delay)
        return delay

    def stated(self, seconds: float) -> float:
        """A delay the body named (``RetryAfter``), clamped by ``max_delay``."""
        return min(max(seconds, 0.0), self.max_delay)


Verdict = Literal["retry", "dead", "failed"]


@dataclass(frozen=True)
class Decision:
    """What happens to a failed attempt: its next state and, for a retry, the wait in seconds."""

    verdict: Verdict
    delay: float = 0.0


def decide(policy: Retry, attempt: int, error: BaseException) -> Decision:
    """Decide the fate of attempt number ``attempt`` (1-based) that raised ``error``."""
    final: Verdict = "dead" if policy.dead_letter else "failed"
    if isinstance(error, TerminalError):
        return Decision(final)
    if attempt >= policy.attempts:
        return Decision(final)
    if isinstance(error, RetryAfter):
        return Decision("retry", policy.stated(error.seconds))
    return Decision("retry", policy.backoff(attempt))
