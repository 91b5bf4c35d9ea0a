"""The webhooks' statements, run on the app's PostgreSQL driver (``webhooks/queries.py``).
Webhooks need PostgreSQL: the memory driver has no endpoints table (``WEBHOOKS_NEED_POSTGRES``)."""

from __future__ import annotations

from typing import Any

import workhorse.webhooks.queries as sql
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.webhooks.errors import WebhookError
from workhorse.webhooks.ports import WebhookApp


def driver_of(app: WebhookApp) -> PostgresCore:
    driver = app.driver
    if not isinstance(driver, PostgresCore):
        raise WebhookError(
            code="WEBHOOKS_NEED_POSTGRES",
            cause=f"webhooks keep their endpoints and ledger in PostgreSQL; this app runs on {type(driver).__name__}",
            fix="build the app on PostgreSQL (App() or App(database_url=...)) to use app.webhooks",
        )
    return driver


async def fetch(app: WebhookApp, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    return await driver_of(app).fetch(statement, params)


async def secrets_of(app: WebhookApp, endpoint_id: str) -> dict[str, Any] | None:
    rows = await fetch(app, sql.ENDPOINT_SECRETS, {"id": endpoint_id})
    return rows[0] if rows else None
