"""What the leader runs besides firing tasks: the ``Duty`` protocol.

Design: docs/guides/cron.md
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from workhorse.leader.store import RoundStore


class Duty(Protocol):
    """One piece of work the fleet's leader does, at most once per round it leads."""

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        """Called after each round that left this process leading, with that round's ``now()``."""
