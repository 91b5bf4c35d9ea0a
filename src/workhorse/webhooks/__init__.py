"""Webhooks: signed deliveries that retry honestly, disable themselves and never leak a secret.

``App(webhooks=WebhookPolicy(...))`` enables them; ``app.webhooks`` (``api.Webhooks``) adds
endpoints and sends; ``verify`` is the receiving half. Modules: ``policy`` (the policy, the drain
check), ``signing`` (the Standard Webhooks format, pure), ``guard`` (URLs and addresses: SSRF),
``wire`` (one POST, httpx imported there only), ``deliver`` (the delivery job), ``api``,
``records``, ``store`` (its statements' runner), ``queries`` (the statements), ``errors``. Importing
this package imports no HTTP client.
"""

from workhorse.webhooks.errors import WebhookDeliveryError, WebhookError
from workhorse.webhooks.policy import WebhookPolicy
from workhorse.webhooks.records import Delivery, DeliveryPage, Endpoint, EndpointPage
from workhorse.webhooks.signing import WebhookVerificationError, sign, verify

__all__ = [
    "Delivery",
    "DeliveryPage",
    "Endpoint",
    "EndpointPage",
    "WebhookDeliveryError",
    "WebhookError",
    "WebhookPolicy",
    "WebhookVerificationError",
    "sign",
    "verify",
]
