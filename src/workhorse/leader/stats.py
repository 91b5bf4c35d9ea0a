"""What one scheduler did: ``SchedulerStats``, moved by the election and the cron duty."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class SchedulerStats:
    """What one scheduler did. ``fenced`` counts planned fires a round refused (lease or watermark
    moved); ``duplicates`` fires whose occurrence key was already held by a live job."""

    rounds: int = 0
    fired: int = 0
    fenced: int = 0
    duplicates: int = 0
    elections: int = 0
    lost: int = 0
    failed_rounds: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
