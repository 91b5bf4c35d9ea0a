"""``from workhorse.relay import Relay``, the import the docs show: the relay lives in the outbox's
folder (``workhorse.outbox.relay``; ``from workhorse.outbox import Relay`` is the same class)."""

from workhorse.outbox.relay import Relay, RelayStats

__all__ = ["Relay", "RelayStats"]
