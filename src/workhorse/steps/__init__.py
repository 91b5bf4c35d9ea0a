"""Durable steps, one folder: a job body's recorded units of work, the events it waits for, and
``app.wait`` for a job's result.

    api       Steps (``ctx.step``): run, sleep, sleep_until, wait_for_event; StepSuspension
    events    stored events: what ``app.publish_event`` checks and writes
    results   ``app.wait(ref, timeout=...)``: the finished job, woken by the settled channel
    postgres  PostgresSteps: the PostgreSQL driver's part, fenced step writes and stored events
    queries   the statements over ``{schema}.steps`` and ``{schema}.events``, by name
"""

from workhorse.steps.api import Steps, StepSuspension

__all__ = ["StepSuspension", "Steps"]
