"""The webhooks' statements, run on the app's PostgreSQL driver (``webhooks/queries.py``).
Webhooks need PostgreSQL: the memory driver has no endpoints table (``POSTGRES_ONLY``)."""

from __future__ import annotations

from typing import Any

import workhorse.webhooks.queries as sql
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.drivers.refusals import POSTGRES_ONLY_FIX
from workhorse.webhooks.errors import WebhookError
from workhorse.webhooks.ports import WebhookApp


def driver_of(app: WebhookApp) -> PostgresCore:
    driver = app.driver
    if not isinstance(driver, PostgresCore):
        raise WebhookError(  # POSTGRES_ONLY, the memory driver's one refusal (it was WEBHOOKS_NEED_POSTGRES)
            code="POSTGRES_ONLY",
            cause="webhooks run on PostgreSQL only (their endpoints and ledger are tables there); this app uses "
            "the memory driver, a test double",
            fix=POSTGRES_ONLY_FIX,
        )
    return driver


async def fetch(app: WebhookApp, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    return await driver_of(app).fetch(statement, params)


async def secrets_of(app: WebhookApp, endpoint_id: str) -> dict[str, Any] | None:
    rows = await fetch(app, sql.ENDPOINT_SECRETS, {"id": endpoint_id})
    return rows[0] if rows else None
