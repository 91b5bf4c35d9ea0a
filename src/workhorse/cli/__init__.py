"""The ``workhorse`` command line (click + rich). ``main`` is the console script.

One module per concept: ``main`` (root options, app loading, refusals), ``run`` (migrate,
worker), ``tasks`` (scheduler, tasks), ``fleet`` (workers), ``jobs`` (ls, show and the operator verbs), ``db``
(the embedded server), ``demo``.
"""

from workhorse.cli import db, demo, fleet, jobs, run, tasks
from workhorse.cli.main import cli, main

for _command in (
    run.migrate,
    run.worker,
    tasks.scheduler,
    tasks.tasks,
    fleet.workers,
    *jobs.COMMANDS,
    db.db,
    demo.demo,
):
    cli.add_command(_command)

__all__ = ["cli", "main"]
