"""The app the scheduler process tests run (`workhorse --app schedapp:app scheduler|worker`).

``SCHEDAPP_MODE`` picks its tasks: ``tick`` (every second) or ``idle`` (once a year, so nothing
is due while a test watches).
"""

from __future__ import annotations

import os
from typing import Any

from workhorse import App, JobContext

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])

if os.environ.get("SCHEDAPP_MODE", "tick") == "tick":

    @app.task(name="tick", every="1s", tenant="none", payload={"source": "schedapp"})
    async def tick(ctx: JobContext, payload: dict[str, Any]) -> str:
        return str(payload["scheduled_at"])

else:

    @app.task(name="new-year", cron="@yearly", tenant="none")
    async def new_year(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None
