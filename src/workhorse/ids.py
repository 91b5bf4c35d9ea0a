"""Job ids: UUIDv7 (RFC 9562) so new rows land at the right-hand edge of the primary-key index,
and their short form: the last SHORT_ID_DIGITS hex digits, which a person can read and type."""

from __future__ import annotations

import os
import random
import threading
import time

# A job's short form (``short_id``): the last 12 hex digits of its id, 48 of its 62 random bits.
# Jobs made together share their leading (time) digits, never these: two jobs share a short id
# with odds of about one in 5.6e14 / n**2 among n jobs (1 in 560 at a million), and a lookup that
# meets two is refused as ambiguous, naming both. Migration 018 indexes it (jobs_short_id_idx).
SHORT_ID_DIGITS = 12

_lock = threading.Lock()
_random = random.Random(os.urandom(16))  # uniqueness, not secrecy: seeded from the OS
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(16)))  # a child never repeats its parent
_last_ms = 0
_counter = 0


def short_id(job_id: str) -> str:
    """A job's short form: the last SHORT_ID_DIGITS hex digits of its id (``5f6a7b8c9d0e``). Every
    command that takes a job id takes it; ``--json`` keeps the whole id."""
    return job_id[-SHORT_ID_DIGITS:]


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
