"""One start/stop/signal discipline for the long-running roles: the worker, the scheduler, and
the command line running both side by side.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from workhorse.errors import ConfigurationError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def check_platform(role: str, platform: str | None = None) -> None:
    """The long-running roles run on Linux and macOS. On Windows they are refused at start, by
    name, rather than left to fail later: their drain is driven by SIGTERM, which Windows does not
    deliver, and psycopg's async connections need a selector event loop there. Enqueueing and the
    operator API work from Windows (with WindowsSelectorEventLoopPolicy)."""
    if (platform or sys.platform) == "win32":
        raise ConfigurationError(
            code="PLATFORM_UNSUPPORTED",
            cause=f"the {role} does not run on Windows: its drain on deploy is driven by SIGTERM, which "
            "Windows does not deliver to a process",
            fix=f"run the {role} on Linux or macOS (a container, or WSL); enqueue and operate from Windows",
        )


def install_stop_signals(
    loop: asyncio.AbstractEventLoop, handler: Callable[[signal.Signals], None]
) -> list[signal.Signals]:
    """Call ``handler(sig)`` on ``loop`` for SIGTERM and SIGINT; answers the signals installed
    (none off the main thread, or where the platform has no signal handlers)."""
    installed: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        return installed
    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, handler, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
            pass
    return installed


def remove_stop_signals(loop: asyncio.AbstractEventLoop, installed: Sequence[signal.Signals]) -> None:
    """Take away what ``install_stop_signals`` installed."""
    for sig in installed:
        loop.remove_signal_handler(sig)


@contextlib.contextmanager
def stop_signals(handler: Callable[[signal.Signals], None], *, enabled: bool = True) -> Iterator[None]:
    """``handler`` on the running loop for SIGTERM and SIGINT while the block runs (``enabled``
    False: nothing is installed, for a role whose owner handles the signals)."""
    loop = asyncio.get_running_loop()
    installed = install_stop_signals(loop, handler) if enabled else []
    try:
        yield
    finally:
        remove_stop_signals(loop, installed)


class Service:
    """The run/stop shape of one long-running role.

    ``running()`` wraps a run: a second one while the first is running is refused with ``code``
    (``SCHEDULER_RUNNING``, ``WORKER_RUNNING``); ``stopping`` is set by ``request_stop()`` (a
    caller's ``stop()``, a signal) and read by the role's loop; ``wait_stopped()`` returns once
    the run has ended (at once when none runs). ``signals`` counts the stop signals received.
    """

    def __init__(self, role: str, *, code: str, fix: str) -> None:
        self.role = role
        self.code = code
        self.fix = fix
        self.is_running = False
        self.signals = 0
        self.stopping = asyncio.Event()
        self.stopped = asyncio.Event()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        check_platform(self.role)
        if self.is_running:
            raise ConfigurationError(code=self.code, cause=f"this {self.role} is already running", fix=self.fix)
        self.is_running = True
        self.stopped.clear()
        try:
            yield
        finally:
            self.is_running = False
            self.stopped.set()

    def request_stop(self) -> None:
        self.stopping.set()

    def signalled(self) -> int:
        """Count one more stop signal; answers how many have come (1: the first)."""
        self.signals += 1
        return self.signals

    async def wait_stopped(self) -> None:
        if self.is_running:
            await self.stopped.wait()
