"""``@app.job`` declarations and ``JobHandle``: enqueue, enqueue_many, enqueue_sync."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from workhorse._ports import EnqueuingApp
from workhorse.context import JobContext
from workhorse.deps import checked_after
from workhorse.durations import Duration, bounded_seconds, check_not_too_late, to_seconds
from workhorse.errors import ConfigurationError
from workhorse.ids import new_job_id, new_job_ids
from workhorse.limits.rules import Concurrency
from workhorse.payload import encode
from workhorse.retry import Retry
from workhorse.storable import flaw
from workhorse.tracing import current_traceparent
from workhorse.typed import PayloadType, payload_type_of
from workhorse.types import JobRef, NewJob

R = TypeVar("R")
P = TypeVar("P", default=Any)  # the payload type the body declares (workhorse.typed); Any when untyped
Body = Callable[[JobContext, Any], Awaitable[R]] | Callable[[JobContext, Any], R]
TenantOf = Callable[[Any], str] | Literal["none"]
MAX_KEY_LENGTH = 200
MAX_TENANT_LENGTH = 200


OutcomeKind = Literal["completed", "dead-lettered", "dropped", "refused"]


@dataclass(frozen=True)
class Outcome:
    """How a job ended, handed to its ``on_settled`` hook after the settle landed.

    ``kind`` is ``completed`` (returned), ``dead-lettered`` (state ``dead``), ``dropped``
    (failed for good with ``dead_letter=False``) or ``refused`` (settled ``failed`` with
    ``JOB_KEY_BUSY`` by ``Concurrency(when_busy="fail")``, the body never ran). Never called for a
    retry, a cancel or a drain.
    """

    kind: OutcomeKind
    job_id: str
    name: str
    attempt: int
    payload: Any
    result: Any = None
    error: dict[str, Any] | None = None


def _name_of(fn: Callable[..., Any]) -> str:
    """A job's default name, ``module.qualname``: the module as an importer names it.

    A function in the module run as ``__main__`` takes the name it has when that module is imported
    (``python -m pkg.mod``: ``pkg.mod``; ``python script.py``: the file's stem, ``script``), so the
    script that enqueues and ``workhorse --app script:app worker`` agree. Refused where no such
    name exists (``python -c``, stdin, an interactive session)."""
    module = fn.__module__
    if module == "__main__":
        module = _main_module_name(fn)
    return f"{module}.{fn.__qualname__}"


def _main_module_name(fn: Callable[..., Any]) -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name != "__main__":
        return name  # python -m pkg.mod
    path = getattr(main, "__file__", None)
    stem = Path(path).stem if isinstance(path, str) and path else ""
    if stem.isidentifier() and stem != "__main__":
        return stem  # python script.py
    qualname = getattr(fn, "__qualname__", repr(fn))
    where = f"the file {path!r} is not importable by that name" if stem else "python -c, stdin or a REPL"
    raise ConfigurationError(
        code="JOB_NAME_UNSTABLE",
        cause=f"function {qualname!r} is declared in __main__ with no module name to name it by ({where}), "
        "so no worker importing your code would know the job",
        fix=f"pass an explicit name: @app.job(name='myproject.{qualname}', ...), or declare it in a module file",
    )


def _check_text(value: Any, what: str, limit: int, fix: str) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ConfigurationError(
            cause=f"{what} expected a non-empty string of at most {limit} characters, got {value!r}", fix=fix
        )
    wrong = flaw(value)
    if wrong is not None:
        raise ConfigurationError(
            cause=f"{what} holds {wrong}; PostgreSQL cannot store it: {value[:60]!r}",
            fix=f"{fix}   # text without NUL characters or lone surrogates",
        )
    return value


_UNRESOLVED: Any = object()


class JobHandle(Generic[R, P]):
    """A declared job. Call ``enqueue`` to schedule it; call the handle itself to run the body inline.

    ``R`` is what the body returns, ``P`` the payload it declares: ``enqueue`` takes a ``P``."""

    def __init__(
        self,
        app: EnqueuingApp,
        fn: Body[R],
        *,
        name: str | None,
        queue: str,
        tenant: TenantOf | None,
        retry: Retry,
        timeout: Duration | None,
        priority: int,
        on_settled: Callable[[Outcome], Any] | None,
        concurrency: int | Concurrency | None = None,
    ) -> None:
        self.name = _check_text(
            name if name is not None else _name_of(fn), "job name", 200, "@app.job(name='emails.send')"
        )
        self.queue = _check_text(queue, f"queue of job {self.name!r}", 200, "@app.job(queue='default')")
        if tenant is None:
            raise ConfigurationError(
                code="JOB_TENANT_REQUIRED",
                cause=f"job {self.name!r} declares no tenant: every job must say whose work it is",
                fix=f"@app.job(tenant=lambda p: p['org_id']) on {self.name!r}, or tenant='none' for work that "
                "belongs to no tenant",
            )
        if tenant != "none" and not callable(tenant):
            raise ConfigurationError(
                code="JOB_TENANT_REQUIRED",
                cause=f"job {self.name!r}: tenant expected a callable payload -> str or the literal 'none', "
                f"got {tenant!r}",
                fix="@app.job(tenant=lambda p: p['org_id'])",
            )
        if not isinstance(retry, Retry):
            raise ConfigurationError(
                cause=f"job {self.name!r}: retry expected a workhorse.Retry, got {retry!r}",
                fix="@app.job(retry=Retry(attempts=5))",
            )
        if isinstance(priority, bool) or not isinstance(priority, int) or not -32768 <= priority <= 32767:
            raise ConfigurationError(
                cause=f"job {self.name!r}: priority expected a whole number from -32768 to 32767, got {priority!r}",
                fix="@app.job(priority=10)   # higher runs first",
            )
        if not callable(fn):
            raise ConfigurationError(cause=f"@app.job expected a function, got {fn!r}", fix="decorate a def")
        self.app = app
        self.fn = fn
        self.tenant = tenant
        self.retry = retry
        self.timeout = None if timeout is None else to_seconds(timeout, what="timeout", allow_zero=False)
        self.priority = priority
        self.on_settled = on_settled
        self.concurrency = Concurrency.of(concurrency, self.name)
        self._flow_key = None if self.concurrency is None or self.concurrency.key is None else self.concurrency
        self.is_async = inspect.iscoroutinefunction(fn)
        self.logger = logging.getLogger(f"workhorse.job.{self.name}")
        self._payload_type: PayloadType | None = _UNRESOLVED  # resolved on first use (forward references)

    @property
    def payload_type(self) -> PayloadType | None:
        """The typed payload the body declares (``workhorse.typed``), or None: it takes plain JSON."""
        if self._payload_type is _UNRESOLVED:
            self._payload_type = payload_type_of(self.fn, self.name)
        return self._payload_type

    def _prepare(self, payload: Any) -> tuple[Any, Any]:
        """(what the tenant and flow-key functions see, what is stored) for one enqueued payload:
        a typed payload is validated and handed to them as its type; stored as its JSON form."""
        typed = self.payload_type
        if typed is None:
            return payload, payload
        value = typed.dump_value(payload, job=self.name)
        return value, typed.plain(value)

    def body_payload(self, stored: Any) -> Any:
        """What the body is handed for a stored payload (its declared type, rebuilt and validated).
        Raises ``PAYLOAD_INVALID`` when it no longer fits: deterministic, so never worth a retry."""
        typed = self.payload_type
        return stored if typed is None else typed.load(stored, job=self.name)

    def __repr__(self) -> str:
        return f"<JobHandle {self.name} queue={self.queue}>"

    def __call__(self, ctx: JobContext, payload: P) -> Any:
        return self.fn(ctx, payload)

    def tenant_for(self, payload: Any) -> str | None:
        if self.tenant == "none":
            return None
        assert callable(self.tenant)
        try:
            value = self.tenant(payload)
        except Exception as error:
            raise ConfigurationError(
                code="TENANT_INVALID",
                cause=f"job {self.name!r}: its tenant function raised {type(error).__name__}: {error}",
                fix="make the tenant function total over every payload you enqueue",
            ) from error
        return _check_text(
            value,
            f"tenant of job {self.name!r}",
            MAX_TENANT_LENGTH,
            "return the tenant id as a string, e.g. tenant=lambda p: str(p['org_id'])",
        )

    def build(
        self,
        payload: P,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        after: Iterable[JobRef | str] | None = None,
        when: str = "done",
    ) -> NewJob:
        """Validate one enqueue and answer the row to insert. Raises before anything is written."""
        deps = checked_after(after, when, job=self.name, keyed=key is not None)
        due = self._when(delay, run_at)
        return self._row(payload, key, due, self._priority(priority), self._queue(queue), deps=deps)

    def _queue(self, queue: str | None) -> str:
        if queue is None:
            return self.queue
        return _check_text(queue, f"queue= of an enqueue of job {self.name!r}", 200, "enqueue(payload, queue='bulk')")

    def _when(self, delay: Duration | None, run_at: datetime | None) -> tuple[datetime | None, float]:
        """The options every row of a batch shares, checked once: (run_at, delay seconds)."""
        if delay is not None and run_at is not None:
            raise ConfigurationError(
                cause=f"job {self.name!r}: both delay= and run_at= were given; they name the same thing",
                fix="pass one of them: delay='5m' or run_at=datetime(..., tzinfo=UTC)",
            )
        if run_at is not None and (not isinstance(run_at, datetime) or run_at.utcoffset() is None):
            raise ConfigurationError(
                cause=f"job {self.name!r}: run_at expected a timezone-aware datetime, got {run_at!r}",
                fix="run_at=datetime(2030, 1, 1, 9, 0, tzinfo=UTC)",
            )
        if run_at is not None:
            check_not_too_late(
                run_at,
                what=f"run_at of job {self.name!r}",
                fix="pass a run_at within 100 years; schedule far-off work nearer the time (a cron task can "
                "enqueue it when it is due)",
            )
        if delay is None:
            return run_at, 0.0
        seconds = bounded_seconds(
            delay,
            what=f"delay= of job {self.name!r}",
            code="DELAY_TOO_LONG",
            fix="pass a delay of at most 36525 days (delay='30d'); schedule far-off work nearer the time",
        )
        return run_at, seconds

    def _priority(self, priority: int | None) -> int:
        if priority is None:
            return self.priority
        if isinstance(priority, bool) or not isinstance(priority, int) or not -32768 <= priority <= 32767:
            raise ConfigurationError(
                cause=f"job {self.name!r}: priority expected a whole number from -32768 to 32767, got {priority!r}",
                fix="enqueue(payload, priority=10)   # higher runs first",
            )
        return priority

    def _row(
        self,
        payload: Any,
        key: str | None,
        when: tuple[datetime | None, float],
        priority: int,
        queue: str,
        *,
        deps: tuple[tuple[str, ...], str] = ((), "done"),
    ) -> NewJob:
        if key is not None:
            _check_text(key, f"key of job {self.name!r}", MAX_KEY_LENGTH, "enqueue(payload, key='welcome:7')")
        payload, stored = self._prepare(payload)
        return NewJob(
            id=new_job_id(),
            name=self.name,
            queue=queue,
            tenant=None if self.tenant == "none" else self.tenant_for(payload),
            payload=encode(stored, max_bytes=self.app.max_payload_bytes),
            key=key,
            priority=priority,
            max_attempts=self.retry.attempts,
            dead_letter=self.retry.dead_letter,
            run_at=when[0],
            delay=when[1],
            flow_key=None if self._flow_key is None else self._flow_key.key_for(payload, self.name),
            traceparent=current_traceparent(),
            after=deps[0],
            when=deps[1],
        )

    async def enqueue(
        self,
        payload: P,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        conn: Any = None,
        queue: str | None = None,
        after: Iterable[JobRef | str] | None = None,
        when: str = "done",
    ) -> JobRef:
        """Schedule one run. With ``conn=``, inside that connection's open transaction (a psycopg
        connection, or a SQLAlchemy or Django one: ``workhorse.connections``). ``queue=`` overrides
        the declared queue for this run. ``after=[ref, ...]``: it waits ('pending') until those jobs
        are final, and runs when all are done (``when="done"``) or whatever they ended
        (``when="finished"``); PostgreSQL only (docs/guides/dependencies.md)."""
        job = self.build(
            payload, key=key, delay=delay, run_at=run_at, priority=priority, queue=queue, after=after, when=when
        )
        refs = await self.app.driver.enqueue_many([job], conn=conn)
        return refs[0]

    async def enqueue_many(
        self,
        payloads: Sequence[P],
        *,
        keys: Sequence[str | None] | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        conn: Any = None,
        queue: str | None = None,
        after: Iterable[JobRef | str] | None = None,
        when: str = "done",
    ) -> list[JobRef]:
        """Schedule a batch in one round trip. ``keys``, when given, pairs one key with each payload.
        ``after=``/``when=`` as in ``enqueue``: every job of the batch waits on the same ones."""
        plain = after is None and when == "done"
        if (
            plain
            and keys is None
            and delay is None
            and run_at is None
            and self._flow_key is None
            and not current_traceparent()
        ):
            self._check_payloads(payloads)
            rows = self._ready_rows(payloads, self._priority(priority), self._queue(queue))  # built as written
            return await self.app.driver.enqueue_ready(len(payloads), rows, conn=conn)
        deps = checked_after(after, when, job=self.name, keyed=keys is not None and any(k is not None for k in keys))
        jobs = self._build_many(
            payloads, keys=keys, delay=delay, run_at=run_at, priority=priority, queue=queue, deps=deps
        )
        return await self.app.driver.enqueue_many(jobs, conn=conn)

    def _ready_rows(self, payloads: Sequence[Any], priority: int, queue: str) -> Iterator[NewJob]:
        """The rows of a keyless, due-now batch, one at a time: what ``_row`` builds, with the ids
        drawn in one go and the per-batch options looked up once."""
        name, limit, max_bytes = self.name, self.retry.attempts, self.app.max_payload_bytes
        dead_letter, tenant_for = self.retry.dead_letter, (None if self.tenant == "none" else self.tenant_for)
        prepare = None if self.payload_type is None else self._prepare
        for job_id, given in zip(new_job_ids(len(payloads)), payloads, strict=True):
            payload, stored = (given, given) if prepare is None else prepare(given)
            tenant = None if tenant_for is None else tenant_for(payload)
            text = encode(stored, max_bytes=max_bytes)
            yield NewJob(job_id, name, queue, tenant, text, None, priority, limit, dead_letter, None, 0.0)

    def enqueue_sync(
        self,
        payload: P,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        conn: Any = None,
        queue: str | None = None,
        after: Iterable[JobRef | str] | None = None,
        when: str = "done",
    ) -> JobRef:
        """``enqueue`` for synchronous code (a Django or Flask view). Safe from any thread."""
        job = self.build(
            payload, key=key, delay=delay, run_at=run_at, priority=priority, queue=queue, after=after, when=when
        )
        return self.app.sync_driver().enqueue_many_sync([job], conn=conn)[0]

    @staticmethod
    def _check_payloads(payloads: Sequence[Any]) -> None:
        if isinstance(payloads, str | bytes | dict) or not isinstance(payloads, Sequence):
            raise ConfigurationError(
                cause=f"enqueue_many expected a list of payloads, got {type(payloads).__name__}",
                fix="job.enqueue_many([p1, p2, p3])",
            )

    def _build_many(
        self,
        payloads: Sequence[Any],
        *,
        keys: Sequence[str | None] | None,
        delay: Duration | None,
        run_at: datetime | None,
        priority: int | None,
        queue: str | None = None,
        deps: tuple[tuple[str, ...], str] = ((), "done"),
    ) -> list[NewJob]:
        self._check_payloads(payloads)
        if keys is not None and len(keys) != len(payloads):
            raise ConfigurationError(
                cause=f"enqueue_many got {len(payloads)} payloads but {len(keys)} keys",
                fix="pass one key per payload (None for no key), or no keys at all",
            )
        when = self._when(delay, run_at)
        chosen, where = self._priority(priority), self._queue(queue)
        return [
            self._row(p, None if keys is None else keys[i], when, chosen, where, deps=deps)
            for i, p in enumerate(payloads)
        ]
