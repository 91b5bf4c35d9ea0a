"""The ``workhorse`` command line (click + rich). ``main`` is the console script.
One module per concept (``run``, ``tasks``, ``jobs``, ``verbs``, ``queues``, ``retention``, ...).

Design: docs/reference/cli.md
"""

from workhorse.cli import (
    backfill,
    dashboard,
    db,
    demo,
    export,
    fleet,
    jobs,
    metrics,
    outbox,
    queues,
    retention,
    run,
    tasks,
    verbs,
    webhooks,
)
from workhorse.cli.main import cli, main

for _command in (
    run.migrate,
    run.worker,
    tasks.scheduler,
    tasks.tasks,
    fleet.workers,
    *jobs.COMMANDS,
    *verbs.COMMANDS,
    *queues.COMMANDS,
    *retention.COMMANDS,
    *export.COMMANDS,
    *backfill.COMMANDS,
    *outbox.COMMANDS,
    *webhooks.COMMANDS,
    metrics.metrics,
    dashboard.dashboard,
    db.db,
    demo.demo,
):
    cli.add_command(_command)

__all__ = ["cli", "main"]
