"""A small app for the CLI tests, loaded with ``--app cliapp:app``.

It reads its database and schema from the environment the test sets, the way a real project's
``App()`` reads ``WORKHORSE_DATABASE_URL``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workhorse import App, JobContext

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
