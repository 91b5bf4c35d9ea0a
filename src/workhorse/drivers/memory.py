"""The in-process driver, for users' unit tests: no server, no schema, one lock, an injectable clock.

Every method mirrors one statement of ``workhorse._db.queries.jobs`` (and how ``PostgresDriver``
reads its answer), so the parity suite can run each scenario on both drivers: the same claim order
and the same two claim arms (burying lapsed final attempts), a due ``delayed`` row reported
``ready``, settle and heartbeat fenced on ``state = 'running'``, ``worker_id`` and ``claims``, the
idempotency key held by LIVE rows of ``(name, tenant or '', key)``, newest-first keyset pages,
operator verbs guarded by the same states and refused with the same ``refusals``, and the step
and event statements of ``workhorse._db.queries.steps`` (fenced writes, suspension in the step's
own write, waits answered by the earliest unexpired event at or after they began, publish waking
matching suspended runs). The operator surface mirrors the same statements: bulk verbs over the
movable rows oldest first, paused queues dropped from every claim, the ``counters`` moved by the
settle and the sweeping claim (minute buckets of this driver's clock, folded by
``rollup_counters``), the errors history and progress. Where Postgres NOTIFYs (enqueue, requeue,
promote, resume, a publish that woke runs), this driver calls its subscribers (``subscribe``):
that is how an in-process worker is woken.

``MemoryDriver`` is one mixin per role of the contract (``drivers/base.py``), each in a sibling
module over the shared internals of ``memory_core``; none imports this module back:

    memory_core      MemoryCore: the rows, the lock, the clock, the subscribers; the schema role
    memory_enqueue   MemoryEnqueue: INSERT_MANY + LIVE_BY_KEYS
    memory_work      MemoryWork: claim, heartbeat, the registry row, settle, progress; the wake-ups
    memory_operate   MemoryOperate: get/list, the verbs, bulk verbs, pauses, snapshot, workers, folds
    memory_steps     MemorySteps: durable steps and stored events
    memory_leadership  MemoryLeadership: the scheduler's round and release under the lock, task rows
    memory_retention MemoryRetention: the purge under the lock

Every name this module defined before that split is still importable from it.
"""

from __future__ import annotations

from workhorse.drivers.memory_core import (
    _COUNTED,
    _UUID,
    SHOWN_LIMIT,
    MemoryCore,
    _by_seq,
    _canonical,
    _CounterKey,
    _error_entry,
    _EventRow,
    _json_text,
    _json_time,
    _KeySlot,
    _load,
    _reject_constant,
    _Row,
    _StepRow,
    _system_clock,
    _trunc,
    log,
)
from workhorse.drivers.memory_enqueue import MemoryEnqueue
from workhorse.drivers.memory_leadership import MemoryLeadership
from workhorse.drivers.memory_operate import _SNAPSHOT_STATES, MemoryOperate
from workhorse.drivers.memory_outbox import MemoryOutbox
from workhorse.drivers.memory_retention import MemoryRetention
from workhorse.drivers.memory_steps import PURGE_BATCH, MemorySteps
from workhorse.drivers.memory_work import _FINISHING, _OUTCOMES, MemoryWork


class MemoryDriver(
    MemoryOutbox, MemoryEnqueue, MemoryWork, MemoryOperate, MemorySteps, MemoryLeadership, MemoryRetention, MemoryCore
):
    """The ``Driver`` in one process. ``clock`` is its database clock (default: UTC wall time)."""

    kind: str = "memory"


__all__ = [
    "PURGE_BATCH",
    "SHOWN_LIMIT",
    "_COUNTED",
    "_FINISHING",
    "_OUTCOMES",
    "_SNAPSHOT_STATES",
    "_UUID",
    "MemoryDriver",
    "_CounterKey",
    "_EventRow",
    "_KeySlot",
    "_Row",
    "_StepRow",
    "_by_seq",
    "_canonical",
    "_error_entry",
    "_json_text",
    "_json_time",
    "_load",
    "_reject_constant",
    "_system_clock",
    "_trunc",
    "log",
]
