"""Every error workhorse raises, and the signals a job body may raise (``TerminalError``, ``RetryAfter``).
Every ``WorkhorseError`` carries a stable UPPER_SNAKE ``code``, a ``cause`` and a one-line ``fix``.

Design: docs/reference/errors.md
"""

from __future__ import annotations

import math
from typing import Any


class WorkhorseError(Exception):
    """The root of every error the library raises."""

    code: str = "WORKHORSE_ERROR"

    def __init__(self, cause: str, fix: str, *, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.cause = cause
        self.fix = fix
        super().__init__(f"{self.code}: {cause} (fix: {fix})")

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "cause": self.cause, "fix": self.fix}


class ConfigurationError(WorkhorseError):
    """A declaration, option or argument was refused before anything was written."""

    code = "CONFIG_INVALID"


class PayloadError(WorkhorseError):
    """A payload cannot be stored as JSON (or is too large); nothing was written."""

    code = "PAYLOAD_INVALID"


class DatabaseError(WorkhorseError):
    """PostgreSQL refused a statement or could not be reached. Wraps the psycopg error.

    ``refused_data`` is True when what was refused is the data itself (a data exception, SQLSTATE
    class 22, or a broken constraint, class 23; psycopg's own refusal to send a NUL): the same
    statement fails the same way on every try, so trying it again cannot help."""

    code = "DATABASE_ERROR"
    refused_data: bool = False


class SchemaError(WorkhorseError):
    """The workhorse schema is not installed, or was installed by newer code."""

    code = "SCHEMA_NOT_MIGRATED"


class JobNotFoundError(WorkhorseError):
    code = "JOB_NOT_FOUND"

    def __init__(self, job_id: str) -> None:
        super().__init__(
            cause=f"no job with id {job_id!r} exists",
            fix="workhorse ls --json   # list jobs and copy an id from there",
        )
        self.job_id = job_id


class OperatorRefusedError(WorkhorseError):
    """An operator verb (cancel, requeue, promote, rm) does not apply to the job as it is."""

    code = "OPERATOR_REFUSED"


class StepError(WorkhorseError):
    """A durable step was misused. ``terminal`` ones dead-letter the job now: retrying cannot help."""

    code = "STEP_ERROR"
    terminal = False


class StepDuplicateError(StepError):
    """Two steps of one run share a name. Names are the replay key: a duplicate is never overwritten."""

    code = "STEP_DUPLICATE"
    terminal = True

    def __init__(self, job: str, step: str) -> None:
        super().__init__(
            cause=f"job {job!r} called a second step named {step!r} in one run; step names are the replay "
            "key, so each must be unique within a run",
            fix=f"give each call its own deterministic name, e.g. f'{step}:{{i}}' inside a loop",
        )
        self.step = step


class StepReplayError(StepError):
    """The run reached a recorded position under another step name: its code changed between runs."""

    code = "STEP_REPLAY_MISMATCH"
    terminal = True

    def __init__(self, job: str, job_id: str, position: int, recorded: str, called: str) -> None:
        super().__init__(
            cause=f"job {job!r} ({job_id}) recorded step {recorded!r} at position {position}, but this run "
            f"calls {called!r} there: the job's code changed its steps while the run was in flight, and "
            "replaying a result into the wrong step is never safe, so the run is parked (dead-lettered)",
            fix=f"workhorse requeue {job_id} --from-step {recorded}   # re-run from there with the new code",
        )
        self.recorded = recorded
        self.called = called


class StepResultError(StepError):
    """A step returned something that cannot be stored as JSON; the step is recorded failed."""

    code = "STEP_RESULT_INVALID"


class StepTimeoutError(StepError):
    """One call of a step's function ran past the step's own ``timeout=``."""

    code = "STEP_TIMEOUT"

    def __init__(self, step: str, seconds: float) -> None:
        super().__init__(
            cause=f"step {step!r} ran past its timeout of {seconds:g}s and was cancelled",
            fix=f"raise the step's timeout= or make {step!r} faster; step retry= retries it within the attempt",
        )
        self.step = step


class EmbeddedServerError(WorkhorseError):
    code = "EMBEDDED_SERVER_FAILED"


class TerminalError(Exception):
    """Raised by a job body: this job can never succeed. Dead-lettered now, attempts unspent."""

    def __init__(self, message: str = "terminal error") -> None:
        super().__init__(message)
        self.message = message


class RetryAfter(Exception):
    """Raised by a job body: retry after ``seconds`` (clamped by the policy's ``max_delay``)."""

    def __init__(self, seconds: float, message: str = "retry requested") -> None:
        if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
            raise ConfigurationError(
                cause=f"RetryAfter expected a finite number of seconds >= 0, got {seconds!r}",
                fix="raise RetryAfter(30, 'rate limited')",
            )
        super().__init__(message)
        self.seconds = float(seconds)
        self.message = message


class LeaseLostError(WorkhorseError):
    """This worker no longer holds the job's claim: it was cancelled, or its lease lapsed."""

    code = "JOB_LEASE_LOST"

    def __init__(self, name: str, job_id: str) -> None:
        super().__init__(
            cause=(
                f"job {name!r} ({job_id}) is no longer claimed by this worker: an operator cancelled it, "
                "or its visibility lease lapsed and another worker claimed it"
            ),
            fix=f"workhorse show {job_id}",
        )


class JobCancelledError(WorkhorseError):
    """Raised by ``ctx.raise_if_cancelled()`` once the attempt has been cancelled."""

    code = "JOB_CANCELLED"

    def __init__(self, name: str, job_id: str, reason: str) -> None:
        super().__init__(
            cause=f"job {name!r} ({job_id}) was cancelled ({reason}); this attempt no longer owns the run",
            fix="check ctx.cancelled between units of work and return early; the queue decides what runs next",
        )
        self.reason = reason
