"""The app of the webhook drain test (`workhorse --app webhookapp:app worker`): deliveries allowed
to 127.0.0.1 over http, a request timeout of 8 s (inside the default 25 s drain)."""

from __future__ import annotations

import os

from workhorse import App, Retry
from workhorse.webhooks import WebhookPolicy

POLICY = WebhookPolicy(allow_private=True, allow_http=True, timeout="8s", retry=Retry(attempts=3, base=0))
app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"], webhooks=POLICY)
