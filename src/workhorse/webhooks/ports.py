"""What the webhooks need of an ``App`` (this package never imports ``workhorse.app``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from workhorse.drivers.base import Driver
from workhorse.jobs import JobHandle


class WebhookApp(Protocol):
    @property
    def driver(self) -> Driver: ...

    @property
    def jobs(self) -> Mapping[str, JobHandle[Any]]: ...

    @property
    def max_payload_bytes(self) -> int: ...
