"""The operator verbs' refusals, shared by every driver so each refuses with the same words."""

from __future__ import annotations

from workhorse.errors import ConfigurationError, JobNotFoundError, OperatorRefusedError, WorkhorseError


def not_found(job_id: str) -> WorkhorseError:
    return JobNotFoundError(job_id)


def not_cancellable(job_id: str, state: str) -> WorkhorseError:
    return OperatorRefusedError(
        code="JOB_NOT_CANCELLABLE",
        cause=f"job {job_id} is {state!r}; only a job that has not finished (pending, ready, delayed, running, "
        "suspended) can be cancelled",
        fix=f"workhorse show {job_id}   # it already finished; requeue it to run it again",
    )


def not_requeueable(job_id: str, state: str) -> WorkhorseError:
    return OperatorRefusedError(
        code="JOB_NOT_REQUEUEABLE",
        cause=f"job {job_id} is {state!r}; only a finished job (done, failed, dead, cancelled) can be requeued",
        fix=f"workhorse promote {job_id}   # to run a waiting job now instead",
    )


def key_held(job_id: str, key: str, holder: str | None) -> WorkhorseError:
    return OperatorRefusedError(
        code="JOB_KEY_HELD",
        cause=f"job {job_id} cannot be requeued: its idempotency key {key!r} is held by live job {holder}",
        fix=f"workhorse show {holder}   # wait for it to finish, or cancel it first",
    )


def not_promotable(job_id: str, state: str) -> WorkhorseError:
    return OperatorRefusedError(
        code="JOB_NOT_PROMOTABLE",
        cause=f"job {job_id} is {state!r}; only a waiting job (ready or delayed) can be promoted",
        fix=f"workhorse requeue {job_id}   # for a finished job",
    )


def not_removable(job_id: str) -> WorkhorseError:
    return OperatorRefusedError(
        code="JOB_RUNNING",
        cause=f"job {job_id} is running; a running job is never removed under its worker",
        fix=f"workhorse cancel {job_id}   # then remove it once it is cancelled",
    )


def claim_queues_empty() -> WorkhorseError:
    return ConfigurationError(
        code="CLAIM_QUEUES_EMPTY",
        cause="a claim named no queues, so it could never take a job",
        fix="app.worker(queues=['default'])  # or queues=None for every queue with a registered job",
    )


def bad_cursor(cursor: str, *, which: str = "after") -> WorkhorseError:
    """``which`` names the argument that carried the cursor: 'after' or 'before'."""
    link = "prev" if which == "before" else "next"
    return ConfigurationError(
        code="PAGE_CURSOR_INVALID",
        cause=f"the {which} cursor {cursor!r} is not a position in the job list (a page's cursor is a job id)",
        fix=f"start from the first page (omit the cursor), then pass each page's `{link}` as {which}",
    )


def step_unknown(job_id: str, step: str, known: list[str]) -> WorkhorseError:
    listed = ", ".join(repr(name) for name in known) if known else "none recorded"
    return OperatorRefusedError(
        code="STEP_UNKNOWN",
        cause=f"job {job_id} has no step named {step!r} (its steps, in order: {listed})",
        fix=f"workhorse show {job_id}   # copy a step name from its steps",
    )


POSTGRES_ONLY_FIX = (
    "use PostgreSQL in this test: the pytest fixture `pg_app` (a fresh schema on WORKHORSE_DATABASE_URL, else on "
    "the embedded PostgreSQL workhorse starts under ./.workhorse), or an App() built without driver='memory'"
)


def postgres_only(feature: str) -> WorkhorseError:
    """The one refusal of what the memory driver (a test double) does not keep: ``POSTGRES_ONLY``."""
    return ConfigurationError(
        code="POSTGRES_ONLY",
        cause=f"{feature} run on PostgreSQL only; this app uses the memory driver, a test double that keeps "
        "enqueue, claims and settles (under every flow-control cap), steps and events, and the reads",
        fix=POSTGRES_ONLY_FIX,
    )
