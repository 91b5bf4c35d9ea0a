"""The embedded server's pid file: which postmaster it names, and clearing one left by a killed
server (``workhorse.embedded`` starts and stops the server; this is what it reads of it)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from workhorse.errors import EmbeddedServerError


def pidfile(data: Path) -> list[str]:
    try:
        return (data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return []


def recorded_pid(data: Path) -> int | None:
    lines = pidfile(data)
    return int(lines[0]) if lines and lines[0].isdigit() else None


def is_postmaster(pid: int, data: Path) -> bool:
    """Whether ``pid`` is a live postmaster of ``data``: not gone, not a zombie, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not Path("/proc/self/stat").exists():
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and os.fsencode(data) in cmdline.split(b"\0")


def clear_stale_pidfile(data: Path) -> None:
    # PostgreSQL removes a dead postmaster's pid file itself, but not when that pid is an unreaped
    # zombie (a SIGKILLed server whose parent is gone) or was reused by another process: both would
    # wedge every start. Removing the file also drops PostgreSQL's own check that no orphaned backend
    # still uses the old shared memory, so wait for those to detach first.
    pid = recorded_pid(data)
    if pid is None or is_postmaster(pid, data):
        return
    lines = pidfile(data)
    shm = lines[6].split() if len(lines) > 6 else []  # line 7: shared memory key and id
    deadline = time.monotonic() + 15
    while len(shm) == 2 and shm_attached(shm[1]):
        if time.monotonic() > deadline:
            raise EmbeddedServerError(
                cause=f"processes of a killed server (pid {pid}) still use shared memory segment {shm[1]}",
                fix="end the leftover 'postgres:' processes, then retry",
                code="EMBEDDED_START_FAILED",
            )
        time.sleep(0.1)
    (data / "postmaster.pid").unlink(missing_ok=True)


def shm_attached(shmid: str) -> bool:
    with contextlib.suppress(OSError):
        for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[1] == shmid:
                return int(fields[6]) > 0
    return False
