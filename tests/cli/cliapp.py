"""A small app for the CLI tests, loaded with ``--app cliapp:app``.

It reads its database and schema from the environment the test sets, the way a real project's
``App()`` reads ``WORKHORSE_DATABASE_URL``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workhorse import App, JobContext, Retry, TerminalError

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


@app.job(name="cli.add", tenant="none")
async def add(ctx: JobContext, payload: dict[str, Any]) -> int:
    return int(payload["a"]) + int(payload["b"])


@app.job(name="cli.shout", queue="loud", tenant="none")
def shout(ctx: JobContext, payload: dict[str, Any]) -> str:
    return str(payload["text"]).upper()


@app.job(name="cli.stuck", queue="stuck", tenant="none")
def stuck(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A plain ``def`` body that ignores ``ctx.cancelled``: no drain can stop its thread."""
    time.sleep(float(payload["seconds"]))


@app.job(name="cli.boom", queue="boom", tenant="none", retry=Retry(attempts=3, base="1h", jitter=False))
def boom(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fails every attempt; ``terminal`` dead-letters it at once. Retries wait an hour, so a test
    moves one on with ``workhorse promote``."""
    if payload.get("terminal"):
        raise TerminalError(f"refused {payload.get('n', 0)}")
    raise RuntimeError(f"attempt {ctx.attempt} broke")


@app.job(name="cli.progress", queue="slow", tenant="none")
async def progress(ctx: JobContext, payload: dict[str, Any]) -> str:
    ctx.progress((3, 10), "copying files")
    return "copied"
