"""Fixtures of the webhook tests: an app on its own schema with deliveries allowed to 127.0.0.1
over http, fast retries, and a receiver the test scripts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from webhookkit import POLICY, Receiver, serving
from workhorse import App


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
