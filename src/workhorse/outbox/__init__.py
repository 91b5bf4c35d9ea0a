"""The transactional outbox, one folder: jobs staged in the caller's own transaction in any
PostgreSQL database, and the relay that moves them into the queue.

    api       Outbox: stage (on the caller's connection) and migrate (the staging table)
    relay     Relay: one loop per source database, claim, enqueue in the queue, mark published
    source    a source database's side: the stage and migrate statements run there, OutboxSource
    postgres  PostgresOutbox: the PostgreSQL driver's part, the relay's insert of staged rows
    queries   every statement above, by name
"""

from workhorse.outbox.api import Outbox
from workhorse.outbox.relay import Relay, RelayStats

__all__ = ["Outbox", "Relay", "RelayStats"]
