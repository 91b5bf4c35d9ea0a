"""What the dashboard's templates show, made from ``app.admin``'s records: plain functions with no
web framework in them (so they are tested without one).

Times are shown relative to the database clock the record came with (``Stats.at``,
``TasksReport.db_now``) where one is at hand, else to the local clock (display only)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

from workhorse.durations import to_seconds
from workhorse.errors import ConfigurationError
from workhorse.search import parse_payload_search
from workhorse.types import ALL_STATES, BULK_STATES, FINISHED_STATES, LIVE_STATES, Job

# The overview's state columns, in the order a person reads a queue: waiting, working, stuck.
OVERVIEW_STATES: tuple[str, ...] = ("ready", "running", "delayed", "suspended", "dead", "failed")
LIST_FILTERS: tuple[str, ...] = (
    "state", "queue", "name", "tenant", "id_prefix", "created_from", "created_to", "payload", "error",
)  # fmt: skip
PAGE_SIZE = 50
_UNITS = ((86400, "d"), (3600, "h"), (60, "m"), (1, "s"))
JSON_SHOWN = 20_000  # characters of a payload or result shown before it is cut (the rest is elided)


def span(seconds: float) -> str:
    """A length of time in at most two units: ``45s``, ``4m 10s``, ``2h 5m``, ``3d 4h``."""
    left = abs(seconds)
    for i, (size, unit) in enumerate(_UNITS):
        if left >= size:
            first = int(left // size)
            if i + 1 < len(_UNITS):
                size2, unit2 = _UNITS[i + 1]
                second = int((left - first * size) // size2)
                if second:
                    return f"{first}{unit} {second}{unit2}"
            return f"{first}{unit}"
    return "0s"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """``3m 4s ago`` for the past, ``in 5m`` for the future, ``now`` within a second, ``-`` for none."""
    if when is None:
        return "-"
    delta = (when - (now or datetime.now(UTC))).total_seconds()  # clock-ok: display only
    if abs(delta) < 1:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def stamp(when: datetime | None) -> str:
    """An absolute UTC time for a title attribute: ``2026-01-31 09:00:05Z``."""
    return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def when_text(value: Any) -> str:
    """An ISO time as a record's JSON spells it (``2026-01-31T09:00:05.123+00:00``), shown as ``stamp``."""
    if isinstance(value, datetime):
        return stamp(value)
    if not isinstance(value, str) or not value:
        return ""
    try:
        return stamp(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return value


def number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def pretty(value: Any) -> str:
    """A payload, result or step value as indented JSON text (escaped by the template)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    return text if len(text) <= JSON_SHOWN else text[:JSON_SHOWN] + f"\n… ({len(text) - JSON_SHOWN:,} more characters)"


def progress_line(progress: Mapping[str, Any] | None) -> str:
    if not progress:
        return ""
    done, total, fraction = progress.get("done"), progress.get("total"), progress.get("fraction")
    amount = ""
    if isinstance(done, int | float) and isinstance(total, int | float):
        amount = f"{done:,}/{total:,}"
    elif isinstance(fraction, int | float):
        amount = f"{fraction * 100:.0f}%"
    message = progress.get("message")
    return " ".join(part for part in (amount, str(message) if message else "") if part)


def progress_fraction(progress: Mapping[str, Any] | None) -> float | None:
    """0..1 for a progress bar, or None when the report says no amount."""
    if not progress:
        return None
    fraction = progress.get("fraction")
    done, total = progress.get("done"), progress.get("total")
    if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
        fraction = done / total
    if isinstance(fraction, int | float) and not isinstance(fraction, bool):
        return max(0.0, min(1.0, float(fraction)))
    return None


def breakable(name: str) -> Markup:
    """A job name, escaped, with a line-break opportunity after each dot and underscore
    (``<wbr>``): a long module-qualified name wraps between its parts, never inside a word."""
    return escape(name).replace(".", Markup(".<wbr>")).replace("_", Markup("_<wbr>"))


def error_line(error: Mapping[str, Any] | None) -> str:
    if not error:
        return ""
    kind, message = error.get("type"), error.get("message")
    return ": ".join(str(part) for part in (kind, message) if part)


# -- what one job offers -------------------------------------------------------------------------


def job_verbs(job: Job) -> list[str]:
    """The one-job verbs that apply to the job as it is (the driver still decides at the click)."""
    verbs = []
    if job.state in LIVE_STATES:
        verbs.append("cancel")
    if job.state in FINISHED_STATES:
        verbs.append("requeue")
    if job.state == "delayed":
        verbs.append("promote")
    if job.state != "running":
        verbs.append("remove")
    return verbs


def bulk_verbs(state: str | None) -> list[str]:
    """The bulk verbs the jobs page offers for a state filter (none without one)."""
    if state is None:
        return []
    return [verb for verb in ("requeue", "cancel", "promote") if state in BULK_STATES[verb]]


@dataclass(frozen=True)
class StepView:
    """One step of the timeline: what a person reads at a glance."""

    name: str
    position: int
    state: str
    attempt: int
    started_at: str | None
    finished_at: str | None
    detail: str
    result: str | None
    error: str


def step_views(job: Job) -> list[StepView]:
    out = []
    for step in job.steps:
        state = str(step.get("state"))
        detail = ""
        if step.get("event") is not None:
            key = step.get("key")
            detail = f"waiting for event {step['event']!r}" + (f" with key {key!r}" if key is not None else "")
            if step.get("wake_at"):
                detail += f", until {when_text(step['wake_at'])}"
        elif state == "sleeping" and step.get("wake_at"):
            detail = f"sleeping until {when_text(step['wake_at'])}"
        result = step.get("result")
        out.append(
            StepView(
                name=str(step.get("name")),
                position=int(step.get("position") or 0),
                state=state,
                attempt=int(step.get("attempt") or 0),
                started_at=step.get("started_at"),
                finished_at=step.get("finished_at"),
                detail=detail,
                result=None if result is None else pretty(result),
                error=error_line(step.get("error")),
            )
        )
    return out


# -- the jobs list's query parameters --------------------------------------------------------------


@dataclass(frozen=True)
class JobFilters:
    """The jobs page's filters, as ``workhorse ls`` takes them: empty fields are no filter."""

    values: dict[str, str]
    created_from: datetime | None
    created_to: datetime | None
    limit: int

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def list_arguments(self) -> dict[str, Any]:
        return {
            "state": self.get("state"),
            "queue": self.get("queue"),
            "name": self.get("name"),
            "tenant": self.get("tenant"),
            "id_prefix": self.get("id_prefix"),
            "created_from": self.created_from,
            "created_to": self.created_to,
            # the searches (admin.list: a walk bounded per page), spelled as `ls --payload/--error`
            "payload": None if self.get("payload") is None else parse_payload_search(self.values["payload"]),
            "error": self.get("error"),
            "limit": self.limit,
        }

    def query(self, **extra: str | None) -> dict[str, str]:
        """The filters (plus ``extra``) as query parameters, for links that keep them."""
        out = dict(self.values)
        if self.limit != PAGE_SIZE:
            out["limit"] = str(self.limit)
        out.update({k: v for k, v in extra.items() if v is not None})
        return out


def job_filters(params: Mapping[str, str], now: datetime | None = None) -> JobFilters:
    """Read the jobs page's query parameters (``?state=dead&queue=q``; ``id-prefix`` and
    ``created-from`` spelled as ``ls`` spells its options work too). Bad values are refused with
    the codes ``ls`` answers."""
    values: dict[str, str] = {}
    for key in LIST_FILTERS:
        raw = params.get(key, params.get(key.replace("_", "-"), ""))
        if raw.strip():
            values[key] = raw.strip()
    state = values.get("state")
    if state is not None and state not in ALL_STATES:
        raise ConfigurationError(
            code="STATE_UNKNOWN",
            cause=f"state expected one of {', '.join(ALL_STATES)}; got {state!r}",
            fix="/jobs?state=dead",
        )
    limit_text = params.get("limit", "").strip()
    limit = PAGE_SIZE
    if limit_text:
        try:
            limit = int(limit_text)
        except ValueError:
            limit = -1
    return JobFilters(
        values=values,
        created_from=instant(values.get("created_from"), "created_from", now),
        created_to=instant(values.get("created_to"), "created_to", now),
        limit=limit,
    )


def instant(value: str | None, what: str, now: datetime | None = None) -> datetime | None:
    """An ISO 8601 time (``Z``, an offset, or naive read as UTC), or a duration meaning that long
    ago (``2h``), as ``workhorse ls --created-from`` reads it."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        pass
    try:
        seconds = to_seconds(value, what=what)
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)  # clock-ok: "2h ago" for a filter
    except (ConfigurationError, OverflowError):
        raise ConfigurationError(
            code="TIME_INVALID",
            cause=f"{what} expected an ISO 8601 time (2026-01-31T09:00Z, an offset, or a naive time read "
            f"as UTC) or a duration meaning that long ago (30m, 2h, 1d), got {value!r}",
            fix=f"/jobs?{what}=2h   # or {what}=2026-01-31T09:00Z",
        ) from None
