"""Webhooks: signed deliveries that retry honestly, disable themselves and never leak a secret.

Design: docs/guides/webhooks.md
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
