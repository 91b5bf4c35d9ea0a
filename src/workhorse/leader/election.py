"""The lease-row election as one process sees it between rounds, and its epoch fence.

Every process running the role competes for ONE row, ``{schema}.leaders``: each round renews it
when this process holds it, or takes it when it is free or lapsed, under a new epoch. The epoch is
the fence: a fire names the epoch it was planned under and lands only in a round that renewed the
lease with that epoch, so a leader frozen past its lease fires nothing. Never a session advisory
lock, which a pool or PgBouncer silently hands to another session.

``Election`` is pure: it reads the lease part of each round's answer and the monotonic time it
arrived, and answers what this process now is (leading, under which epoch, until when) and how
long a standby waits before its next round (the holder's lease end, or the interval).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from workhorse.leader.rounds import RoundAnswer, TaskState
from workhorse.leader.stats import SchedulerStats

log = logging.getLogger("workhorse.scheduler")

WAKE_MARGIN = 0.005  # seconds past a due time (or a lease expiry) before the round that acts on it
MIN_WAIT = 0.01  # the shortest sleep between two rounds unless the round itself asks for another now


@dataclass
class Election:
    """What this process believes of the lease between rounds."""

    scheduler_id: str
    stats: SchedulerStats
    epoch: int | None = None  # ours, while the last round left us holding the lease
    known: dict[str, TaskState] | None = None  # the task rows the holder plans from
    lease_deadline: float | None = None  # monotonic time our lease runs out
    holder_deadline: float | None = None  # monotonic time the other holder's lease runs out

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def absorb(self, answer: RoundAnswer, mono: float) -> bool:
        """Take in the lease part of a round's answer, which arrived at monotonic time ``mono``.
        Answers whether this round made us the leader (a first election, or the lease re-taken
        under a new epoch after ours lapsed)."""
        became = False
        if answer.epoch is not None:
            if self.epoch is None:
                became = True
                self.stats.elections += 1
                log.info("scheduler %s: leading (epoch %d)", self.scheduler_id, answer.epoch)
            elif answer.epoch != self.epoch:
                became = True
                self.stats.lost += 1
                log.warning(
                    "scheduler %s: its lease lapsed before this round (epoch %d, now %d): the fires planned "
                    "under the old epoch were fenced out and are planned again",
                    self.scheduler_id,
                    self.epoch,
                    answer.epoch,
                )
            self.epoch = answer.epoch
            self.known = answer.tasks
            self.holder_deadline = None
            if answer.expires_at is not None:
                self.lease_deadline = mono + (answer.expires_at - answer.db_now).total_seconds()
        else:
            if self.epoch is not None:
                self.stats.lost += 1
                log.warning(
                    "scheduler %s: lost leadership to %s (epoch %s); it fired nothing this round and stands by",
                    self.scheduler_id,
                    answer.holder,
                    answer.holder_epoch,
                )
            self.epoch = None
            self.known = None
            self.lease_deadline = None
            self.holder_deadline = (
                None
                if answer.holder_expires_at is None
                else mono + (answer.holder_expires_at - answer.db_now).total_seconds()
            )
        return became

    def lapse_if_silent(self, mono: float) -> bool:
        """No round landed for a whole lease: whatever we held is gone (and fenced anyway).
        Answers whether this ended our leadership."""
        if self.epoch is not None and self.lease_deadline is not None and mono >= self.lease_deadline:
            log.warning("scheduler %s: no round landed within the lease; no longer leading", self.scheduler_id)
            self.stats.lost += 1
            self.epoch = None
            self.known = None
            return True
        return False

    def standby_wait(self, mono: float, interval: float) -> float:
        """A standby's wait before its next round: the interval, or until the holder's lease ends."""
        wait = interval
        if self.holder_deadline is not None:
            wait = min(wait, max(self.holder_deadline - mono, 0.0) + WAKE_MARGIN)
        return max(wait, MIN_WAIT)

    def step_down(self) -> int | None:
        """Stop leading; answers the epoch to release (None when we held nothing)."""
        epoch, self.epoch, self.known = self.epoch, None, None
        return epoch
