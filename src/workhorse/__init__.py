"""workhorse: durable background work for Python on PostgreSQL.

Declare jobs on an ``App``, enqueue them (inside your own transaction if you like), and run a
``Worker``. Jobs are never lost, never run by two workers at once, retried with backoff and
dead-lettered when they keep failing. See the README for the guided tour.
"""

from workhorse.app import App
from workhorse.context import JobContext
from workhorse.deps import Dependency
from workhorse.drivers.memory import MemoryDriver
from workhorse.drivers.postgres import PostgresDriver
from workhorse.errors import (
    ConfigurationError,
    DatabaseError,
    JobCancelledError,
    JobNotFoundError,
    LeaseLostError,
    OperatorRefusedError,
    PayloadError,
    RetryAfter,
    SchemaError,
    StepDuplicateError,
    StepError,
    StepReplayError,
    StepResultError,
    StepTimeoutError,
    TerminalError,
    WorkhorseError,
)
from workhorse.jobs import JobHandle, Outcome
from workhorse.limits.rules import Concurrency, Limits, Rate
from workhorse.outbox import Outbox
from workhorse.retention.policy import PurgeReport, Retention
from workhorse.retry import Retry
from workhorse.steps import Steps, StepSuspension
from workhorse.types import Job, JobRef, Page, PublishedEvent
from workhorse.worker import Worker, WorkerStats

__all__ = [
    "App",
    "Concurrency",
    "ConfigurationError",
    "DatabaseError",
    "Dependency",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobHandle",
    "JobNotFoundError",
    "JobRef",
    "LeaseLostError",
    "Limits",
    "MemoryDriver",
    "OperatorRefusedError",
    "Outbox",
    "Outcome",
    "Page",
    "PayloadError",
    "PostgresDriver",
    "PublishedEvent",
    "PurgeReport",
    "Rate",
    "Retention",
    "Retry",
    "RetryAfter",
    "SchemaError",
    "StepDuplicateError",
    "StepError",
    "StepReplayError",
    "StepResultError",
    "StepSuspension",
    "StepTimeoutError",
    "Steps",
    "TerminalError",
    "Worker",
    "WorkerStats",
    "WorkhorseError",
]
