"""An app whose every name is hostile to Rich markup, for ``tests/cli/test_hostile_values.py``,
loaded with ``--app hostileapp:app``. Its job takes its tenant, progress message, result and
error from the payload, so a test puts whatever text it likes in each."""

from __future__ import annotations

import os
from typing import Any

from workhorse import App, JobContext, TerminalError

HOSTILE = ["[/]", "[bold]x[/bold]", "file:[/srv/in/a.csv]", "[link=http://x]y[/link]", "[red]", ":thumbs_up:"]
NAME = "hostile.[bold]x[/bold]"
QUEUE = "q[/]"
TASK = "tick.[link=http://x]y[/link]"

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


@app.job(name=NAME, queue=QUEUE, tenant=lambda payload: payload["tenant"])
async def hostile(ctx: JobContext, payload: dict[str, Any]) -> Any:
    ctx.progress((1, 2), payload["progress"])
    if payload.get("error") is not None:
        raise TerminalError(payload["error"])
    return payload["result"]


@app.task(TASK, every="1h", tenant="none")
async def tick(ctx: JobContext, payload: Any) -> None:
    return None
