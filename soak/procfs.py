"""What /proc says about a process: is it alive, stopped by SIGSTOP, gone; which TCP ports it holds.

Linux only, like the soak. Read by the job bodies (is the holder of a job's advisory lock a live
process?) and by the conductor (which server sessions belong to the fleet?).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

ProcState = Literal["live", "stopped", "gone"]

_PROC = Path("/proc")
_STOPPED = frozenset("Tt")  # T: stopped by a signal (SIGSTOP); t: stopped by a tracer
_DEAD = frozenset("ZXx")  # a zombie or a dying task runs nothing


def proc_state(pid: int) -> ProcState:
    """``live`` (running or sleeping), ``stopped`` (SIGSTOP) or ``gone`` (dead, a zombie, unknown)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return "gone"
    # The command name is in parentheses and may hold spaces or parentheses: the state follows the last ')'.
    fields = stat[stat.rfind(")") + 1 :].split()
    if not fields:
        return "gone"
    state = fields[0]
    if state in _STOPPED:
        return "stopped"
    if state in _DEAD:
        return "gone"
    return "live"


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` has open (empty when it is gone)."""
    inodes: set[int] = set()
    fd_dir = _PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def local_ports(inodes: set[int]) -> set[int]:
    """Local TCP ports (IPv4 and IPv6) of the sockets with these inodes."""
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[9]) in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def tcp_ports_of(pids: list[int]) -> set[int]:
    """The local ports of every TCP socket the processes ``pids`` hold: their client ends of server sessions."""
    inodes: set[int] = set()
    for pid in pids:
        inodes |= socket_inodes(pid)
    return local_ports(inodes) if inodes else set()
