"""Helpers of the Django tests: the test project (``site/``: settings, the ``shop`` app with a
model, the admin) on a database of its own, created fresh and dropped at the end; workhorse's
tables in a schema of their own too."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

SITE = Path(__file__).parent / "site"


def site_env(database_url: str, dbname: str, schema: str) -> dict[str, str]:
    """The environment the test project's settings read (its database, workhorse's schema)."""
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    return {
        "WHDJ_NAME": dbname,
        "WHDJ_USER": str(info.get("user") or "postgres"),
        "WHDJ_PASSWORD": str(info.get("password") or ""),
        "WHDJ_HOST": str(info.get("host") or "127.0.0.1"),
        "WHDJ_PORT": str(info.get("port") or "5432"),
        "WHDJ_SCHEMA": schema,
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
    }


def create_database(database_url: str) -> str:
    name = f"whdj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create database {name}")  # type: ignore[arg-type]
    return name


def drop_database(database_url: str, name: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        conn.execute(f"drop database if exists {name}")  # type: ignore[arg-type]


def url_of(database_url: str, dbname: str) -> str:
    info: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(database_url))
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def run(args: list[str], env: dict[str, str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in the test project's folder with its environment; checked by the caller."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(SITE), **env}
    return subprocess.run(
        [sys.executable, *args], cwd=SITE, env=full, capture_output=True, text=True, timeout=timeout, check=False
    )
