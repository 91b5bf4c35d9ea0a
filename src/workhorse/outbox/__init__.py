"""The transactional outbox, one folder: jobs staged in the caller's own transaction in any
PostgreSQL database, and the relay that moves them into the queue.

Design: docs/guides/outbox.md
"""

from workhorse.outbox.api import Outbox
from workhorse.outbox.relay import Relay, RelayStats

__all__ = ["Outbox", "Relay", "RelayStats"]
