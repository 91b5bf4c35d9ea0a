"""``call(fn)``: run workhorse's async operator API from Django's synchronous code (the admin, a view).

Design: docs/guides/django.md
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
TIMEOUT = 60.0  # seconds a call may take before the caller stops waiting

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop  # noqa: PLW0603 - one loop per process, made on first use
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="workhorse-django-portal", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def call(fn: Callable[[], Awaitable[T]]) -> T:
    """``await fn()`` on the portal's loop; answers its result or raises its error."""

    async def run() -> T:
        return await fn()

    return asyncio.run_coroutine_threadsafe(run(), _running_loop()).result(TIMEOUT)
