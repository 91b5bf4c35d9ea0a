"""Durable steps, one folder: a job body's recorded units of work, the events it waits for, and
``app.wait`` for a job's result.

Design: docs/guides/steps.md
"""

from workhorse.steps.api import Steps, StepSuspension

__all__ = ["StepSuspension", "Steps"]
