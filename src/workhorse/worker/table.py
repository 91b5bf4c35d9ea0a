"""The table of held runs: the one owner of what a worker holds.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Sequence

from workhorse.worker.records import Held

PREFETCH_BELOW = 0.05  # seconds: bodies shorter than this on average let the worker claim ahead
PREFETCH_WINDOW = 0.1  # seconds of work a worker may hold claimed ahead of its slots
PREFETCH_MAX = 30  # and never more than this many times its slots (with 1 ms bodies: 30 ms of wall work)
# Finished runs waiting for their settle, in multiples of the slots, beyond which the worker stops
# claiming: a settle connection that is slow or down must not let it take leases it cannot settle.
# Short bodies keep a few settle batches in flight (each lingers, then takes a round trip), so a
# bound of one batch of slots would stall the claims behind every settle.
SETTLE_BACKLOG = 10


class RunTable:
    def __init__(self, concurrency: dict[str, int], *, claim_ahead: bool = True) -> None:
        self.concurrency = concurrency
        # Under a per-tenant rate a job claimed ahead would start later than the stamp its claim
        # wrote says: no claiming ahead. (Under caps a job claimed ahead holds its fleet slots
        # while it waits, at most PREFETCH_WINDOW: it is counted, so no cap is exceeded.)
        self.claim_ahead = claim_ahead
        self.total = sum(concurrency.values())
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._busy: dict[str, int] = dict.fromkeys(concurrency, 0)  # bodies running, per queue
        # Claimed ahead of a free slot (short jobs only, see prefetch), started as slots free.
        self._buffer: dict[str, collections.deque[Held]] = {q: collections.deque() for q in concurrency}
        self._forgotten = 0  # runs fully let go of; a burst ends only if none was since its last claim
        self._runtime = math.inf  # moving average of body run time, seconds; decides prefetching

    # -- reading --------------------------------------------------------------------------------

    @property
    def forgotten(self) -> int:
        return self._forgotten

    def free(self) -> dict[str, int]:
        """Free slots per queue, counting the jobs it may claim ahead; none while SETTLE_BACKLOG
        times as many finished runs as the worker has slots still wait for their settle (the
        settle connection is slow or down: do not pile up more)."""
        with self._lock:
            unsettled = sum(1 for h in self._held.values() if h.slot_released and not h.settled)
            if unsettled >= self.total * SETTLE_BACKLOG:
                return {}
            room = {
                q: n + self._prefetch(q) - self._busy[q] - len(self._buffer[q]) for q, n in self.concurrency.items()
            }
            return {q: n for q, n in room.items() if n > 0}

    def _prefetch(self, queue: str) -> int:
        """Jobs this worker may claim ahead of a free slot: about PREFETCH_WINDOW of work at the
        observed body run time, at most PREFETCH_MAX times the slots, and none unless bodies are
        short (under PREFETCH_BELOW on average). Bigger claims mean fewer round trips per job, and
        a buffered job waits milliseconds; long jobs are never held back from an idle worker."""
        if self._runtime >= PREFETCH_BELOW or not self.claim_ahead:
            return 0
        slots = self.concurrency[queue]
        return min(slots * PREFETCH_MAX, int(slots * PREFETCH_WINDOW / max(self._runtime, 1e-4)))

    def busy(self) -> int:
        """Bodies running now."""
        with self._lock:
            return sum(self._busy.values())

    def idle(self) -> bool:
        """Nothing held at all (settled runs whose slot is still taken count as held)."""
        with self._lock:
            return not self._held

    def leased(self) -> list[Held]:
        """Runs whose lease the heartbeat keeps: every held run not yet settled or let go."""
        with self._lock:
            return [h for h in self._held.values() if not h.settled]

    # -- writing --------------------------------------------------------------------------------

    def hold(self, runs: Sequence[Held]) -> bool:
        """Take claimed runs into the buffer; answers whether the worker held no lease before
        (the heartbeat slept on the idle schedule and should look at its schedule again)."""
        with self._lock:
            was_idle = all(h.settled for h in self._held.values())
            for held in runs:
                self._held[held.lease.job_id] = held
                self._buffer[held.slot_queue].append(held)
        return was_idle

    def startable(self) -> list[Held]:
        """Take runs out of the buffer into free slots (each takes its slot now)."""
        starting: list[Held] = []
        with self._lock:
            for queue, waiting in self._buffer.items():
                while waiting and self._busy[queue] < self.concurrency[queue]:
                    self._busy[queue] += 1
                    starting.append(waiting.popleft())
        return starting

    def take_buffered(self) -> list[Held]:
        """Empty the buffer (a drain hands these back unspent): they never took a slot."""
        with self._lock:
            waiting = [held for queue in self._buffer.values() for held in queue]
            for queue in self._buffer.values():
                queue.clear()
        for held in waiting:
            held.body_done, held.thread_alive, held.slot_released = True, False, True
        return waiting

    def ran(self, took: float) -> None:
        """A body ran for ``took`` seconds: the moving average that decides prefetching."""
        self._runtime = took if math.isinf(self._runtime) else self._runtime * 0.9 + took * 0.1

    def release(self, held: Held) -> None:
        """The slot frees as soon as the body returned (and its thread, for a sync body): the
        settle follows on its own, fenced, while the next job already runs. The run stays held
        (and its lease renewed) until it is settled too."""
        with self._lock:
            if not held.slot_released and held.body_done and not held.thread_alive:
                held.slot_released = True
                self._busy[held.slot_queue] -= 1
            if held.settled and held.slot_released and self._held.get(held.lease.job_id) is held:
                del self._held[held.lease.job_id]
                self._forgotten += 1

    def forget(self, held: Held) -> None:
        """The run's settle landed, or it is let go: nothing more to write for it."""
        held.settled = True
        self.release(held)
