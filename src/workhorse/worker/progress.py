"""Progress reports: every run's newest report in one fenced statement, at most once a second.

A body calls ``ctx.progress``; the context asks once per report taken (``Held.progress_requested``),
so a chatty body costs one call here per write, not per report. Runs on the control loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from workhorse.context import PROGRESS_INTERVAL
from workhorse.errors import WorkhorseError
from workhorse.types import StepFence
from workhorse.worker.records import Control, Held

log = logging.getLogger("workhorse.worker")


class Progress:
    def __init__(self, *, worker_id: str, control: Control, to_control: Callable[[Callable[[], None]], None]) -> None:
        self.worker_id = worker_id
        self.control = control
        self.to_control = to_control
        self._due: list[Held] = []  # runs with a report to write (control loop only)

    def requested(self, held: Held) -> None:
        """From the body (its loop or its thread): the run has a report to write. When the control
        loop already closed, the settle wrote it."""
        self.to_control(lambda: self._arm(held))

    def _arm(self, held: Held) -> None:
        self._due.append(held)
        self.control.progress.set()

    async def run(self) -> None:
        """A run whose body returned is skipped: its settle writes the report."""
        control = self.control
        while True:
            await control.progress.wait()
            control.progress.clear()
            due, self._due = self._due, []
            reports = [
                (StepFence(h.lease.job_id, self.worker_id, h.lease.claims), text)
                for h in due
                if (text := h.run.ctx.take_progress()) is not None and not h.body_done
            ]
            if reports:
                try:
                    await control.settle.record_progress(reports)
                except WorkhorseError as error:  # advisory: the next report, or the settle, writes it again
                    log.warning(
                        "worker %s: %d progress report(s) not written (%s)", self.worker_id, len(reports), error.cause
                    )
            await asyncio.sleep(PROGRESS_INTERVAL)
