"""The ``workhorse`` command line (click + rich). ``main`` is the console script.

One module per concept: ``main`` (root options, app loading, refusals), ``run`` (migrate,
worker), ``tasks`` (scheduler, tasks), ``fleet`` (workers), ``jobs`` (ls, show), ``verbs`` (the
operator verbs, on one job or ``--all`` in a state), ``queues`` (pause, resume, stats),
``retention`` (purge), ``export``, ``backfill`` (backfill ls, run), ``outbox`` (outbox migrate,
relay), ``webhooks`` (webhooks ls, deliveries, enable, disable), ``metrics`` (the Prometheus
exposition, once or served), ``dashboard`` (the web dashboard), ``db`` (the embedded server),
``demo``.
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
