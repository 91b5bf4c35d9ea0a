"""Job ids: UUIDv7 (RFC 9562) so new rows land at the right-hand edge of the primary-key index,
and their short form (``short_id``): 12 hex digits a person can read and type."""

from __future__ import annotations

import os
import random
import threading
import time

# A job's short form (``short_id``), 12 hex digits of its id: the low 24 bits of its millisecond
# (6), its counter within that millisecond (3) and 12 of its random bits (3). Jobs made together
# share their leading digits (the millisecond's high bits), never all of these: one process never
# repeats a counter in a millisecond, two processes share one with odds of about 1 in 2,000, and
# then the random digits with 1 in 4,096. A lookup (admin_sql.SHORT_ID_LOOKUP) probes one range
# of the primary key per 2**24 ms (4.7 hours) the table spans, so a short id needs no index of its
# own (which every claim and settle would write); one that names two jobs is refused as
# ambiguous, naming both.
SHORT_ID_DIGITS = 12
SHORT_ID_PERIODS = 20_000  # 4.7-hour periods a lookup probes at most, newest first: about 10 years

_lock = threading.Lock()
_random = random.Random(os.urandom(16))  # uniqueness, not secrecy: seeded from the OS
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(16)))  # a child never repeats its parent
_last_ms = 0
_counter = 0


def short_id(job_id: str) -> str:
    """A job's short form (``a3e7b24c1f0d``): the low 24 bits of its millisecond, its counter and
    12 random bits, from its id ``tttttttt-tttt-7ccc-vrrr-rrrrrrrrrrrr``. Every command that takes
    a job id takes it; ``--json`` keeps the whole id."""
    digits = job_id.replace("-", "").lower()
    return digits[6:12] + digits[13:16] + digits[17:20]


def new_job_id() -> str:
    """A time-ordered UUID: 48 bits of Unix milliseconds, then a counter and random bits."""
    return new_job_ids(1)[0]


def new_job_ids(count: int) -> list[str]:
    """``count`` ids in order: the clock is read and the lock taken once, and the 48-bit time
    prefix is formatted once per millisecond rather than once per id. Within a millisecond the
    12-bit counter starts at a random value below 2048 and counts up; when it runs out, the ids
    borrow the next millisecond, so ids drawn in one process always increase."""
    global _last_ms, _counter
    ids: list[str] = []
    getrandbits = _random.getrandbits
    with _lock:
        now_ms = time.time_ns() // 1_000_000  # clock-ok: id ordering only, never a decision
        if now_ms <= _last_ms:
            now_ms, first = _last_ms, _counter + 1
        else:
            first = getrandbits(11)
        while True:
            if first > 0xFFF:  # the counter ran out in this millisecond: borrow the next one
                now_ms, first = now_ms + 1, 0
            ms = f"{now_ms:012x}"
            head = f"{ms[:8]}-{ms[8:]}-7"
            last = min(0xFFF, first + count - len(ids) - 1)
            for counter in range(first, last + 1):
                tail = (0b10 << 62) | getrandbits(62)
                ids.append(f"{head}{counter:03x}-{tail >> 48:04x}-{tail & 0xFFFFFFFFFFFF:012x}")
            if len(ids) >= count:
                break
            first = last + 1
        if count:
            _last_ms, _counter = now_ms, last
    return ids
