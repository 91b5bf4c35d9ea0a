"""The worker's small records: its stats, one held run, and the control loop's state.

Records hold data and point at nothing that owns them: a held run reaches its worker only
through the two hooks it was given (the body loop's driver, for its steps, and the progress
callback), so no part of the worker has to see another part's fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from workhorse.drivers.base import Driver
from workhorse.steps import Steps
from workhorse.types import Lease, StepFence
from workhorse.worker.clock import lease_clock
from workhorse.worker.execute import Run, Verdict


@dataclass
class WorkerStats:
    """What one worker did. ``interrupted`` counts attempts handed back by a drain, unspent;
    ``suspended`` runs that suspended themselves in a step (a sleep or a wait), also unspent."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    failed: int = 0
    interrupted: int = 0
    suspended: int = 0
    lease_lost: int = 0
    settle_missed: int = 0
    buried: int = 0
    refused: int = 0  # settled failed JOB_KEY_BUSY by the claim (Concurrency(when_busy='fail'))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True)
class Held:
    """One claimed run, from its claim until its settle landed (or it was let go)."""

    run: Run
    lease: Lease
    slot_queue: str
    worker_id: str
    renewed_at: float  # lease_clock() when the statement that last set its lease was sent (claim or renewal)
    body_driver: Callable[[], Driver]  # the driver of the loop the body runs on, for its steps
    on_progress: Callable[[Held], None]  # the run has a progress report to write
    drain_begun: Callable[[], bool] = lambda: False  # the worker began a drain (ctx.draining)
    body_done: bool = False
    settled: bool = False
    thread_alive: bool = False
    slot_released: bool = False

    # The context's hooks (``context.RunHooks``): built only when a body uses them.

    def make_steps(self) -> Steps:
        claimed = self.run.claimed
        return Steps(
            self.run.ctx,
            driver=self.body_driver,  # resolved when a step runs, on the body loop
            fence=StepFence(claimed.id, self.worker_id, claimed.claims),
            is_async=self.run.handle.is_async,
        )

    def progress_requested(self) -> None:
        self.on_progress(self)

    def draining(self) -> bool:
        return self.drain_begun()


@dataclass
class Control:
    """State owned by the control loop (only touched from the control thread)."""

    loop: asyncio.AbstractEventLoop
    claim: Driver
    settle: Driver
    heartbeat: Driver
    wake: asyncio.Event
    settles: asyncio.Queue[tuple[Held, Verdict]]
    last_renewal: float = field(default_factory=lease_clock)  # when the last landed renewal was sent
    beat: asyncio.Event = field(default_factory=asyncio.Event)  # set: renew now (a job was cancelled)
    leased: asyncio.Event = field(default_factory=asyncio.Event)  # set: a claim took leases (reschedule the beat)
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # set: a run has a report to write
    recheck: bool = False  # a run ended in a way that may have made work due (retry, suspension...)
