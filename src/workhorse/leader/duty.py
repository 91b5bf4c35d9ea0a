"""What the leader runs besides firing tasks: the ``Duty`` protocol.

The cron round is the leader's first duty, and it shapes the round itself (``cron.py`` plans the
fires the round statement makes and reads its answer). Every other duty runs after a round that
left this process leading, on the database clock that round answered: the counter folds
(``folds.py``), retention's purge (``purge.py``) and the rescue of lapsed leases (``rescue.py``),
each a module of its own. A duty that fails with a ``WorkhorseError`` counts as a failed round (the leader backs
off and tries again); one that must not, catches its own errors.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from workhorse.leader.store import RoundStore


class Duty(Protocol):
    """One piece of work the fleet's leader does, at most once per round it leads."""

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        """Called after each round that left this process leading, with that round's ``now()``."""
