"""The watch for jobs this worker can never run: ready jobs on its queues under names it does not
know (a script run as ``__main__`` that enqueued ``__main__.hello``, a job renamed or not yet
deployed). The claim only ever asks for known names, so such a job would wait in silence.

Cheap on purpose: one ``snapshot`` read (state counts by queue and name, one statement) on the
settle connection, idle then, as the worker starts, again every CHECK_EVERY seconds while the worker
holds nothing (half a statement a minute on an idle worker), and once at the end of a burst run.
Each (queue, name) is logged at WARNING at most once per WARN_EVERY seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from workhorse.errors import WorkhorseError
from workhorse.types import Snapshot, StateCount

log = logging.getLogger("workhorse.worker")

FIRST_CHECK = 0.0  # seconds after start: a worker started beside stranded jobs says so at once
CHECK_EVERY = 120.0  # seconds between reads while the worker is idle
WARN_EVERY = 600.0  # seconds before the same (queue, name) is logged again


class SnapshotSource(Protocol):
    async def snapshot(self, since: float | None) -> Snapshot: ...


def unknown_ready(states: Iterable[StateCount], queues: Sequence[str], names: Sequence[str]) -> list[StateCount]:
    """The ready (due) counts on ``queues`` whose name is not in ``names``, by queue then name."""
    served, known = set(queues), set(names)
    found = [s for s in states if s.state == "ready" and s.queue in served and s.name not in known and s.count > 0]
    return sorted(found, key=lambda s: (s.queue, s.name))


def likely_meant(name: str, names: Sequence[str]) -> str | None:
    """A known name with the same function part (``__main__.hello`` for ``script.hello``), if exactly one."""
    tail = name.rpartition(".")[2]
    matches = [n for n in names if n != name and n.rpartition(".")[2] == tail]
    return matches[0] if len(matches) == 1 else None


class UnknownNames:
    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        names: Sequence[str],
        source: SnapshotSource,
        idle: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker_id = worker_id
        self.queues = list(queues)
        self.names = list(names)
        self.source = source
        self.idle = idle
        self.clock = clock
        self._warned: dict[tuple[str, str], float] = {}

    async def run(self) -> None:
        """Until cancelled: check while idle, every CHECK_EVERY seconds."""
        await asyncio.sleep(FIRST_CHECK)
        while True:
            if self.idle():
                await self.check()
            await asyncio.sleep(CHECK_EVERY)

    async def check(self) -> list[StateCount]:
        """Read the counts once and warn about each unknown name not warned about lately."""
        try:
            snapshot = await self.source.snapshot(0.0)  # no counter window: state counts are what is read
        except WorkhorseError as error:
            log.debug("worker %s: could not look for unknown job names (%s)", self.worker_id, error.cause)
            return []
        found = unknown_ready(snapshot.states, self.queues, self.names)
        self.report(found)
        return found

    def report(self, found: Iterable[StateCount]) -> None:
        now = self.clock()
        for state in found:
            key = (state.queue, state.name)
            last = self._warned.get(key)
            if last is not None and now - last < WARN_EVERY:
                continue
            self._warned[key] = now
            meant = likely_meant(state.name, self.names)
            hint = f" (this worker knows {meant!r}: was it enqueued from a script run as __main__?)" if meant else ""
            log.warning(
                "worker %s: %d ready job(s) named %r on queue %r, a name this worker does not know, so it "
                "will never claim them%s; fix: run a worker whose --app declares %r, or remove them "
                "(workhorse ls --state ready --name %s)",
                self.worker_id,
                state.count,
                state.name,
                state.queue,
                hint,
                state.name,
                state.name,
            )
