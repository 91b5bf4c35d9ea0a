"""`workhorse webhooks ls | deliveries | enable | disable`: tables, --json documents, keyset
pages, refusals; and no command ever prints a secret."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from clikit import UNKNOWN_ID, as_json, invoke, refused, refused_human

from webhookkit import Reply, serving
from workhorse import App, Retry
from workhorse.webhooks import Endpoint, WebhookPolicy

POLICY = WebhookPolicy(allow_private=True, allow_http=True, disable_after=3, retry=Retry(attempts=1))


T = TypeVar("T")


@pytest.fixture
def hook_app(database_url: str, schema: str) -> App:
    app = App(database_url, schema=schema, webhooks=POLICY)
    app.migrate_sync()
    return app


def on(app: App, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` on a loop of its own (the CLI under test runs its own), closing the app's pool."""

    async def body() -> T:
        try:
            return await work()
        finally:
            await app.close()

    return asyncio.run(body())


def delivered(app: App, statuses: list[int]) -> Endpoint:
    """An endpoint with one ledger row per status, the first sent first."""

    async def work() -> Endpoint:
        with serving() as receiver:
            receiver.script = [Reply(code) for code in statuses]
            endpoint = await app.webhooks.add_endpoint(receiver.url, tenant="o1", events=["order.paid"])
            for n in range(len(statuses)):
                await app.webhooks.send(endpoint.id, "order.paid", {"n": n})
                await app.worker(queues=["webhooks"], concurrency=1, handle_signals=False).run(burst=True)
        return endpoint

    return on(app, work)


def add(app: App) -> Endpoint:
    return on(app, lambda: app.webhooks.add_endpoint("http://127.0.0.1:9/hooks", tenant="o1"))


def read(app: App, endpoint_id: str) -> Endpoint:
    return on(app, lambda: app.webhooks.endpoint(endpoint_id))


def test_ls_and_deliveries_in_json_and_for_a_person(hook_app: App, database_url: str, schema: str) -> None:
    endpoint = delivered(hook_app, [200, 500, 204])
    listing = as_json(invoke(database_url, schema, "webhooks", "ls", "--json"))
    assert listing["next"] is None
    [row] = listing["endpoints"]
    assert row["id"] == endpoint.id and row["enabled"] is True and row["events"] == ["order.paid"]
    assert "secret" not in row

    first = as_json(invoke(database_url, schema, "webhooks", "deliveries", endpoint.id, "--limit", "2", "--json"))
    assert [(d["status"], d["response_code"]) for d in first["deliveries"]] == [("delivered", 204), ("failed", 500)]
    assert first["next"] is not None
    rest = as_json(
        invoke(database_url, schema, "webhooks", "deliveries", endpoint.id, "--after", first["next"], "--json")
    )
    assert [(d["status"], d["response_code"]) for d in rest["deliveries"]] == [("delivered", 200)]
    assert rest["next"] is None

    table = invoke(database_url, schema, "webhooks", "ls")
    assert table.exit_code == 0 and endpoint.id in table.stdout and "enabled" in table.stdout
    ledger = invoke(database_url, schema, "webhooks", "deliveries", endpoint.id)
    assert ledger.exit_code == 0 and "delivered" in ledger.stdout and "500" in ledger.stdout
    for text in (table.stdout, ledger.stdout, str(listing), str(first)):
        assert endpoint.secret is not None and endpoint.secret.removeprefix("whsec_") not in text


def test_disable_then_enable(hook_app: App, database_url: str, schema: str) -> None:
    endpoint = add(hook_app)
    off = as_json(invoke(database_url, schema, "webhooks", "disable", endpoint.id, "--reason", "maintenance", "--json"))
    assert off["endpoint"]["enabled"] is False and off["endpoint"]["disabled_reason"] == "maintenance"
    assert not read(hook_app, endpoint.id).enabled
    on = invoke(database_url, schema, "webhooks", "enable", endpoint.id)
    assert on.exit_code == 0 and "enabled" in on.stdout
    found = read(hook_app, endpoint.id)
    assert found.enabled and found.disabled_reason is None and found.consecutive_failures == 0


def test_refusals(hook_app: App, database_url: str, schema: str) -> None:
    endpoint = add(hook_app)
    for verb in ("enable", "disable", "deliveries"):
        refused(invoke(database_url, schema, "webhooks", verb, UNKNOWN_ID, "--json"), "WEBHOOK_ENDPOINT_NOT_FOUND")
        refused_human(invoke(database_url, schema, "webhooks", verb, "not-an-id"), "WEBHOOK_ENDPOINT_NOT_FOUND")
    refused(
        invoke(database_url, schema, "webhooks", "deliveries", endpoint.id, "--after", "x1", "--json"),
        "PAGE_CURSOR_INVALID",
    )
    refused(invoke(database_url, schema, "webhooks", "ls", "--limit", "500", "--json"), "PAGE_LIMIT_INVALID")
    refused(invoke(database_url, schema, "webhooks", "ls", "--after", "nope", "--json"), "WEBHOOK_ENDPOINT_NOT_FOUND")
    assert read(hook_app, endpoint.id).enabled  # nothing changed


def test_an_empty_list_and_help(database_url: str, schema: str) -> None:
    assert invoke(database_url, schema, "migrate").exit_code == 0
    assert as_json(invoke(database_url, schema, "webhooks", "ls", "--json")) == {"endpoints": [], "next": None}
    assert "no webhook endpoints" in invoke(database_url, schema, "webhooks", "ls").stdout
    assert "deliveries" in invoke(database_url, schema, "webhooks", "--help").stdout
