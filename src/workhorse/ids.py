"""Job ids: UUIDv7 (RFC 9562) so new rows land at the right-hand edge of the primary-key index."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_job_id() -> uuid.UUID:
    """A time-ordered UUID: 48 bits of Unix milliseconds, then a counter and random bits."""
    global _last_ms, _counter  # noqa: PLW0603 - one generator per process, guarded by _lock
    with _lock:
        now_ms = time.time_ns() // 1_000_000  # clock-ok: id ordering only, never a decision
        if now_ms <= _last_ms:
            now_ms = _last_ms
            _counter = (_counter + 1) & 0xFFF
            if _counter == 0:
                now_ms += 1
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = now_ms
        rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (now_ms << 80) | (0x7 << 76) | (_counter << 64) | (0b10 << 62) | rand
    return uuid.UUID(int=value)
