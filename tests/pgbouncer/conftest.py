"""A PgBouncer of the test session's own (Debian's ``pgbouncer``), in ``pool_mode=transaction``,
on a private port, in front of the tests' PostgreSQL; stopped when the session ends. One per xdist
worker, so parallel runs never share one. Without the binary every test here skips, saying how to
install it (``.ci/run`` does)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import psycopg
import pytest

BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def bouncer_url(database_url: str) -> Iterator[str]:
    """The URL of a transaction-mode PgBouncer in front of ``database_url``."""
    if BINARY is None:
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer); the PgBouncer tests need it")
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    host, port = str(info.get("host") or "127.0.0.1"), str(info.get("port") or 5432)
    if host.startswith("/"):
        pytest.skip("the tests' PostgreSQL listens on a Unix socket; PgBouncer here needs host:port")
    user = str(info.get("user") or "postgres")
    folder = tempfile.mkdtemp(prefix="wh-pgbouncer-")
    listen = _free_port()
    with open(os.path.join(folder, "users.txt"), "w") as f:
        f.write(f'"{user}" ""\n')
    with open(os.path.join(folder, "pgbouncer.ini"), "w") as f:
        f.write(
            f"[databases]\n* = host={host} port={port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {folder}/users.txt\n"
            "pool_mode = transaction\nmax_client_conn = 1000\ndefault_pool_size = 20\n"
            f"logfile = {folder}/pgbouncer.log\nadmin_users = {user}\n"
        )
    os.chmod(folder, 0o777)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o666)
    command = [BINARY, *(["-u", "postgres"] if os.geteuid() == 0 else []), os.path.join(folder, "pgbouncer.ini")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info["host"], info["port"] = "127.0.0.1", str(listen)
    url = psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", listen), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.skip(f"pgbouncer did not start; see {folder}/pgbouncer.log")
            time.sleep(0.05)
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process says it talks to a transaction pooler (``WORKHORSE_POOLER=transaction``)."""
    monkeypatch.setenv("WORKHORSE_POOLER", "transaction")
    monkeypatch.delenv("WORKHORSE_LISTEN_URL", raising=False)
