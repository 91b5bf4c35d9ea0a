"""Cron tasks: ``@app.task`` declarations, their schedules, and the arithmetic of occurrences.

A task is a job with a schedule. ``@app.task(cron="*/5 * * * *", tenant="none")`` declares the
job (it runs on every worker like any ``@app.job``) and tells the scheduler role when to enqueue
it; ``task.enqueue(...)`` still enqueues it by hand. Everything here is pure: no clock is read,
every function takes the instant it reasons about (the scheduler passes the database's ``now()``).

Schedules
    ``cron=``   five fields (minute hour day-of-month month day-of-week), parsed by ``cronsim``:
                ranges, lists, steps, names (``jan``..``dec``, ``mon``..``sun``), and the aliases
                ``@yearly`` ``@annually`` ``@monthly`` ``@weekly`` ``@daily`` ``@midnight``
                ``@hourly``. Day-of-month and day-of-week combine the Vixie way: when either
                starts with ``*`` both must match, otherwise either may. Evaluated in ``timezone=``
                (an IANA name, ``UTC`` by default).
    ``every=``  a fixed period (``"30s"``, ``"5m"``, a ``timedelta``), at least one second, counted
                in absolute time from the Unix epoch: ``every="1h"`` fires on the hour UTC,
                whatever the zone; a zone other than UTC is refused with it.

Daylight saving (cron in a zone that has it): a cron expression names WALL-CLOCK times.
    * A wall time that does not exist (skipped by spring-forward) runs ONCE, at the first valid
      instant after the gap: ``30 2 * * *`` in America/New_York on 2026-03-08 fires at 03:00
      EDT. Several skipped times (``*/15`` at 02:00, 02:15, ...) collapse into that one firing.
    * A wall time that happens twice (the hour repeated by fall-back) fires ONCE, at its first
      instance: ``30 1 * * *`` fires at 01:30 EDT, not again at 01:30 EST; ``*/15`` fires at
      01:00 .. 01:45 EDT and resumes at 02:00 EST.
    Formally: the instant of wall time ``w`` is the first instant whose local time is at or after
    ``w``. For an absolute cadence across transitions, use ``every=``.

``next_after(t)`` is always strictly later than ``t``. An expression that can never fire
(``0 0 31 2 *``) is refused at declaration (``TASK_NEVER_FIRES``), never at fire time.

Catch-up, after the scheduler was down across several occurrences (``catch_up=``):
    ``"skip"``      fire only the latest missed occurrence; the earlier ones are dropped.
    ``"run-once"``  fire ONE job for the whole gap: it is keyed by the latest missed occurrence
                    and its payload says what it covers:
                    ``payload["catch_up"] = {"first": <first missed>, "last": <latest missed>}``.
    Neither ever enqueues a backlog of every missed occurrence.

The fired job's payload is the task's ``payload=`` plus ``scheduled_at`` (the occurrence, ISO 8601
UTC), and its idempotency key is ``task:<occurrence>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from workhorse.durations import Duration, bounded_seconds
from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.jobs import Body, JobHandle, Outcome, TenantOf, _name_of
from workhorse.payload import encode
from workhorse.retry import Retry
from workhorse.types import JobRef, NewJob

R = TypeVar("R")
CatchUp = Literal["skip", "run-once"]
CATCH_UP_POLICIES: tuple[str, ...] = ("skip", "run-once")
RESERVED_KEYS = ("scheduled_at", "catch_up")
MAX_EXPRESSION = 200  # characters: a cron line longer than this is a mistake, and costs CPU to parse
MIN_EVERY = timedelta(seconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KEY_PREFIX = "task:"
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_CRON_FIX = "five fields: minute hour day-of-month month day-of-week, e.g. cron='*/5 * * * *' or cron='@hourly'"
# Where the declaration check for "never fires" starts. Cron has no year field, so every pattern
# repeats within the 28-year calendar cycle that cronsim's 50-year search covers.
_PROBE_FROM = datetime(2001, 1, 1, tzinfo=UTC)
_FOLD_SKIP_LIMIT = 100_000  # matches a lookup may pass over inside a repeated hour; never reached


def iso(instant: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, as every time workhorse prints."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def occurrence_key(occurrence: datetime) -> str:
    """The idempotency key of the job fired for ``occurrence``: ``task:2026-03-08T07:00:00Z``."""
    return KEY_PREFIX + iso(occurrence)


def _utc(instant: datetime) -> datetime:
    if not isinstance(instant, datetime) or instant.utcoffset() is None:
        raise ConfigurationError(
            cause=f"expected a timezone-aware datetime, got {instant!r}",
            fix="pass datetime(..., tzinfo=UTC)",
        )
    return instant.astimezone(UTC)


class Schedule:
    """When a task fires. ``next_after`` answers the first occurrence strictly after an instant."""

    kind: str
    text: str
    timezone: str

    def next_after(self, instant: datetime) -> datetime | None:
        raise NotImplementedError

    def latest_until(self, first: datetime, now: datetime) -> datetime:
        """The latest occurrence at or before ``now``, given ``first``, an occurrence at or before it.

        Bisection with ``next_after`` only: each step either moves to a later occurrence past the
        midpoint or halves the interval, so a gap of years costs a few dozen evaluations.
        """
        lo, hi = _utc(first), _utc(now)
        while True:
            after = self.next_after(lo)
            if after is None or after > hi:
                return lo
            mid = lo + (hi - lo) / 2
            found = self.next_after(mid)
            if found is not None and found <= hi:
                lo = max(found, after)
            else:
                hi = mid  # nothing in (mid, hi]: the answer is in [lo, mid]

    def describe(self) -> str:
        return self.text


class CronSchedule(Schedule):
    """A five-field cron expression evaluated on the wall clock of ``timezone`` (see the module doc)."""

    kind = "cron"

    def __init__(self, expression: str, timezone: str = "UTC", *, task: str = "?") -> None:
        self.zone = _zone(timezone, task)
        self.timezone = timezone
        self.expression = _check_cron(expression, task)
        self.text = expression.strip()
        self._utc = self.zone.key in ("UTC", "Etc/UTC", "Etc/Zulu", "Zulu", "Etc/UCT", "UCT", "Universal")
        if self.next_after(_PROBE_FROM) is None:
            raise ConfigurationError(
                code="TASK_NEVER_FIRES",
                cause=f"task {task!r}: cron {expression!r} matches no date in any year, so it would never fire",
                fix="check the day-of-month against the month (February has 29 days at most, April 30), "
                "e.g. cron='0 0 28 2 *' or cron='0 0 L 2 *' for the last day of February",
            )

    def next_after(self, instant: datetime) -> datetime | None:
        instant = _utc(instant)
        wall = instant.replace(tzinfo=None) if self._utc else instant.astimezone(self.zone).replace(tzinfo=None)
        matches = CronSim(self.expression, wall)  # naive wall time: cronsim walks the calendar
        for _ in range(_FOLD_SKIP_LIMIT):
            try:
                candidate = next(matches)
            except StopIteration:
                return None  # no match within cronsim's 50-year horizon
            at = self.instant_of(candidate)
            if at > instant:  # skips the first pass of a repeated hour when `instant` is in the second
                return at
        raise AssertionError(f"cron {self.text!r}: no later occurrence found after {instant}")  # pragma: no cover

    def instant_of(self, wall: datetime) -> datetime:
        """The first instant whose local time is at or after the naive wall time ``wall``."""
        if self._utc:
            return wall.replace(tzinfo=UTC)
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        if first.astimezone(self.zone).replace(tzinfo=None) == wall:
            return first  # a real wall time; fold=0 is its first instance when it happens twice
        # Skipped by spring-forward. fold=1 reads it with the offset after the change, landing
        # before the gap; fold=0 with the offset before, landing after it. The end of the gap
        # (the first valid instant) lies between: bisect to the second.
        lo = int(wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC).timestamp())
        hi = int(first.timestamp())
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, UTC).astimezone(self.zone).replace(tzinfo=None) >= wall:
                hi = mid
            else:
                lo = mid
        return datetime.fromtimestamp(hi, UTC)

    def describe(self) -> str:
        return f"cron {self.text}" + ("" if self.timezone == "UTC" else f" ({self.timezone})")


class EverySchedule(Schedule):
    """A fixed period in absolute time, anchored at the Unix epoch so every process agrees."""

    kind = "every"
    timezone = "UTC"

    def __init__(self, every: Duration, *, task: str = "?") -> None:
        try:
            seconds = bounded_seconds(
                every,
                what=f"every= of task {task!r}",
                code="TASK_EVERY_TOO_LONG",
                fix="a period of at most 36525 days (every='7d'); for a date each year use cron='0 0 1 1 *'",
                allow_zero=False,
            )
        except ConfigurationError as error:
            if error.code == "TASK_EVERY_TOO_LONG":
                raise
            raise ConfigurationError(code="TASK_SCHEDULE_INVALID", cause=error.cause, fix=error.fix) from error
        period = timedelta(seconds=seconds)
        if period < MIN_EVERY:
            raise ConfigurationError(
                code="TASK_SCHEDULE_INVALID",
                cause=f"task {task!r}: every={every!r} is shorter than one second; the scheduler is not a busy loop",
                fix="every='1s' at the least; for faster work, have one run loop over several items",
            )
        self.period = period
        self._micros = period // timedelta(microseconds=1)
        self.text = _span(period)

    def next_after(self, instant: datetime) -> datetime:
        since = (_utc(instant) - EPOCH) // timedelta(microseconds=1)
        return EPOCH + timedelta(microseconds=(since // self._micros + 1) * self._micros)

    def latest_until(self, first: datetime, now: datetime) -> datetime:
        since = (_utc(now) - EPOCH) // timedelta(microseconds=1)
        return max(_utc(first), EPOCH + timedelta(microseconds=(since // self._micros) * self._micros))

    def describe(self) -> str:
        return f"every {self.text}"


def _span(period: timedelta) -> str:
    micros = period // timedelta(microseconds=1)
    for size, unit in ((86_400_000_000, "d"), (3_600_000_000, "h"), (60_000_000, "m"), (1_000_000, "s")):
        if micros % size == 0:
            return f"{micros // size}{unit}"
    return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{period.total_seconds()}s"


def _zone(timezone: Any, task: str) -> ZoneInfo:
    fix = "timezone='UTC' or an IANA name like timezone='America/New_York' (see zoneinfo.available_timezones())"
    if not isinstance(timezone, str) or not timezone:
        raise ConfigurationError(
            code="TASK_ZONE_UNKNOWN", cause=f"task {task!r}: timezone expected an IANA name, got {timezone!r}", fix=fix
        )
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise ConfigurationError(
            code="TASK_ZONE_UNKNOWN",
            cause=f"task {task!r}: no time zone named {timezone!r} is known to this machine "
            "(names are case-sensitive; the tzdata package supplies them where the OS has none)",
            fix=fix,
        ) from error


def _check_cron(expression: Any, task: str) -> str:
    def refuse(why: str) -> ConfigurationError:
        return ConfigurationError(
            code="TASK_SCHEDULE_INVALID", cause=f"task {task!r}: cron {expression!r} {why}", fix=_CRON_FIX
        )

    if not isinstance(expression, str):
        raise ConfigurationError(
            code="TASK_SCHEDULE_INVALID",
            cause=f"task {task!r}: cron expected a string, got {expression!r}",
            fix=_CRON_FIX,
        )
    if len(expression) > MAX_EXPRESSION:
        raise refuse(f"is {len(expression)} characters long; at most {MAX_EXPRESSION} are accepted")
    if not expression.isascii() or not expression.strip():
        raise refuse("is empty or holds characters other than ASCII letters, digits and , - * / # L W @")
    text = " ".join(expression.split())
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            raise refuse(f"is not a known alias ({', '.join(ALIASES)})")
        text = alias
    parts = text.split(" ")
    if len(parts) == 6:
        raise refuse("has six fields; workhorse cron has no seconds field (use every='30s' for sub-minute periods)")
    if len(parts) != 5:
        raise refuse(f"has {len(parts)} field(s), not five")
    for index, (label, part) in enumerate(zip(_FIELDS, parts, strict=True)):
        alone = ["0", "0", "*", "*", "*"]  # each field checked on its own, the others neutral
        alone[index] = part
        try:
            CronSim(" ".join(alone), _PROBE_FROM.replace(tzinfo=None))
        except (CronSimError, ValueError, IndexError) as error:
            raise refuse(f"has a bad {label} field {part!r}") from error
    try:
        CronSim(text, _PROBE_FROM.replace(tzinfo=None))
    except CronSimError as error:
        # Every field parsed on its own: what cronsim refuses now is a date no month has.
        raise ConfigurationError(
            code="TASK_NEVER_FIRES",
            cause=f"task {task!r}: cron {expression!r} names a day no month in it has ({error}), so it would "
            "never fire",
            fix="check the day-of-month against the month (February has 29 days at most, April 30), "
            "e.g. cron='0 0 28 2 *' or cron='0 0 L 2 *' for the last day of February",
        ) from error
    return text


def parse_schedule(
    *, cron: str | None = None, every: Duration | None = None, timezone: str = "UTC", task: str = "?"
) -> Schedule:
    """Read a task's schedule, refusing anything ambiguous, malformed or that never fires."""
    if (cron is None) == (every is None):
        raise ConfigurationError(
            code="TASK_SCHEDULE_INVALID",
            cause=f"task {task!r} declares "
            + ("both cron= and every=" if cron is not None else "no schedule: neither cron= nor every= was given"),
            fix="@app.task(cron='*/5 * * * *', tenant='none') or @app.task(every='30s', tenant='none')",
        )
    if cron is not None:
        return CronSchedule(cron, timezone, task=task)
    if timezone != "UTC":
        _zone(timezone, task)  # an unknown zone is reported as such first
        raise ConfigurationError(
            code="TASK_SCHEDULE_INVALID",
            cause=f"task {task!r}: every= counts absolute time from the Unix epoch, so timezone={timezone!r} "
            "would change nothing",
            fix=f"drop timezone=, or name wall-clock times with cron=, e.g. cron='0 9 * * *', timezone={timezone!r}",
        )
    assert every is not None
    return EverySchedule(every, task=task)


@dataclass(frozen=True)
class Fire:
    """What to fire now: ``occurrence`` (the key and the new watermark), and ``first``, the first
    occurrence that was owed. ``first < occurrence`` means occurrences were missed."""

    occurrence: datetime
    first: datetime
    next_at: datetime | None

    @property
    def missed(self) -> bool:
        return self.first < self.occurrence


def plan_fire(schedule: Schedule, watermark: datetime, now: datetime) -> Fire | None:
    """The one fire owed at ``now`` by a task whose occurrences up to ``watermark`` are accounted
    for, or None when nothing is due. Whatever the gap, at most ONE fire: its occurrence is the
    latest one at or before ``now`` (the catch-up policy decides only what its payload says)."""
    first = schedule.next_after(watermark)
    if first is None or first > now:
        return None
    second = schedule.next_after(first)
    if second is None or second > now:
        return Fire(occurrence=first, first=first, next_at=second)
    latest = schedule.latest_until(second, now)
    return Fire(occurrence=latest, first=first, next_at=schedule.next_after(latest))


class TaskHandle(Generic[R]):
    """A declared task: its job (``.job``), its schedule and catch-up policy, and enqueue by hand."""

    def __init__(self, job: JobHandle[R], schedule: Schedule, *, catch_up: CatchUp, payload: dict[str, Any]) -> None:
        self.job = job
        self.name = job.name
        self.schedule = schedule
        self.catch_up = catch_up
        self.payload = payload

    def __repr__(self) -> str:
        return f"<TaskHandle {self.name} {self.schedule.describe()} catch_up={self.catch_up}>"

    def __call__(self, ctx: Any, payload: Any) -> Any:
        return self.job(ctx, payload)

    @property
    def descriptor(self) -> tuple[str, str, str]:
        """What the tasks table stores to notice a changed declaration: schedule, zone, catch-up."""
        return (self.schedule.describe(), self.schedule.timezone, self.catch_up)

    def payload_for(self, fire: Fire) -> dict[str, Any]:
        payload: dict[str, Any] = {**self.payload, "scheduled_at": iso(fire.occurrence)}
        if self.catch_up == "run-once" and fire.missed:
            payload["catch_up"] = {"first": iso(fire.first), "last": iso(fire.occurrence)}
        return payload

    def build_fire(self, fire: Fire) -> NewJob:
        """The job row for ``fire``, keyed by its occurrence (validated like any enqueue)."""
        return self.job.build(self.payload_for(fire), key=occurrence_key(fire.occurrence))

    def _manual(self, payload: Any) -> Any:
        return {**self.payload, "scheduled_at": None} if payload is None else payload

    async def enqueue(self, payload: Any = None, **options: Any) -> JobRef:
        """Enqueue one run now, by hand. Without a payload: the task's own, with ``scheduled_at`` None."""
        return await self.job.enqueue(self._manual(payload), **options)

    def enqueue_sync(self, payload: Any = None, **options: Any) -> JobRef:
        return self.job.enqueue_sync(self._manual(payload), **options)

    async def enqueue_many(self, payloads: Sequence[Any], **options: Any) -> list[JobRef]:
        return await self.job.enqueue_many(payloads, **options)


class TaskRegistry(Protocol):
    """What declaring a task needs of the app (an ``App``): its job and task registries, the
    declaration of the task's job, and the payload limit a template is checked against."""

    jobs: dict[str, JobHandle[Any]]
    tasks: dict[str, TaskHandle[Any]]

    @property
    def max_payload_bytes(self) -> int: ...

    def _declare(
        self,
        fn: Body[R],
        *,
        name: str | None,
        queue: str,
        tenant: TenantOf | None,
        retry: Retry | None,
        timeout: Duration | None,
        priority: int,
        on_settled: Callable[[Outcome], Any] | None,
    ) -> JobHandle[R]:
        """Declare the job (``@app.job``'s work); refuses a name another job already holds."""
        ...


class TaskDecorator:
    """What ``@app.task(...)`` answers: apply it to the body, as with ``@app.job``."""

    def __init__(self, app: TaskRegistry, name: str | None, options: dict[str, Any]) -> None:
        self._app = app
        self._name = name
        self._options = options

    def __call__(self, fn: Body[R], /) -> TaskHandle[R]:
        return declare_task(self._app, fn, name=self._name, **self._options)


def declare_task(
    app: TaskRegistry,
    fn: Body[R],
    *,
    name: str | None,
    cron: str | None,
    every: Duration | None,
    timezone: str,
    catch_up: str,
    payload: dict[str, Any] | None,
    queue: str,
    tenant: TenantOf | None,
    retry: Retry | None,
    timeout: Duration | None,
    priority: int,
    on_settled: Callable[[Outcome], Any] | None,
) -> TaskHandle[R]:
    """Validate a task completely, then declare its job and register it on ``app.tasks``."""
    if not callable(fn):
        raise ConfigurationError(cause=f"@app.task expected a function, got {fn!r}", fix="decorate a def")
    label = name if isinstance(name, str) else _name_of(fn)
    schedule = parse_schedule(cron=cron, every=every, timezone=timezone, task=label)
    if catch_up not in CATCH_UP_POLICIES:
        raise ConfigurationError(
            code="TASK_CATCH_UP_INVALID",
            cause=f"task {label!r}: catch_up expected 'skip' or 'run-once', got {catch_up!r}",
            fix="@app.task(..., catch_up='skip')   # or 'run-once': one job for the whole missed gap",
        )
    template = _check_payload(app, label, payload)
    previous = app.jobs.get(label)
    job = app._declare(  # refuses a name another job or task already holds
        fn,
        name=name,
        queue=queue,
        tenant=tenant,
        retry=retry,
        timeout=timeout,
        priority=priority,
        on_settled=on_settled,
    )
    policy: CatchUp = "skip" if catch_up == "skip" else "run-once"
    handle = TaskHandle(job, schedule, catch_up=policy, payload=template)
    # Prove, at declaration, that a fired job can be built (the tenant function included).
    probe = schedule.next_after(_PROBE_FROM)
    assert probe is not None
    try:
        handle.build_fire(Fire(occurrence=probe, first=probe, next_at=None))
    except WorkhorseError:
        if previous is None:
            app.jobs.pop(job.name, None)
        raise
    app.tasks[job.name] = handle
    return handle


def _check_payload(app: TaskRegistry, task: str, payload: Any) -> dict[str, Any]:
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise ConfigurationError(
            code="TASK_PAYLOAD_INVALID",
            cause=f"task {task!r}: payload= expected a dict (scheduled_at is added to it), got "
            f"{type(payload).__name__}",
            fix="@app.task(..., payload={'region': 'eu'})",
        )
    clash = [k for k in RESERVED_KEYS if k in payload]
    if clash:
        raise ConfigurationError(
            code="TASK_PAYLOAD_INVALID",
            cause=f"task {task!r}: payload= uses the key(s) {', '.join(clash)}, which the scheduler fills in",
            fix="rename those keys in payload=",
        )
    try:
        encoded = encode(payload, max_bytes=app.max_payload_bytes)
    except WorkhorseError as error:
        raise ConfigurationError(
            code="TASK_PAYLOAD_INVALID", cause=f"task {task!r}: payload= {error.cause}", fix=error.fix
        ) from error
    decoded: dict[str, Any] = json.loads(encoded)
    return decoded
