"""Fixtures of the webhook tests: an app on its own schema with deliveries allowed to 127.0.0.1
over http, fast retries, and a receiver the test scripts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from webhookkit import Receiver, serving
from workhorse import App, Retry
from workhorse.webhooks import WebhookPolicy

POLICY = WebhookPolicy(
    allow_private=True, allow_http=True, disable_after=4, timeout="3s", retry=Retry(attempts=3, base=0, jitter=False)
)


@pytest.fixture
async def hook_app(database_url: str, schema: str) -> AsyncIterator[App]:
    app = App(database_url, schema=schema, webhooks=POLICY)
    await app.migrate()
    yield app
    await app.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving() as found:
        yield found
