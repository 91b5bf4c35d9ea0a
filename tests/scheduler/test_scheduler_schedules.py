"""Schedules, pure: parsing, refusals at declaration, the DST policy, next() strictly later, catch-up.

Time is injected everywhere: each test hands the schedule the instants it reasons about, and the
DST tests step a clock minute by minute through the transitions, firing what ``plan_fire`` says.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from workhorse import App, ConfigurationError, JobContext, Retry, WorkhorseError
from workhorse.leader.scheduler import Scheduler
from workhorse.leader.tasks import CronSchedule, EverySchedule, Fire, parse_schedule, plan_fire

NY = "America/New_York"


def at(text: str) -> datetime:
    """A UTC instant from 'YYYY-MM-DD HH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(instant: datetime, zone: str) -> str:
    return instant.astimezone(ZoneInfo(zone)).strftime("%m-%d %H:%M %Z")


def step_through(
    schedule: Any, start: datetime, end: datetime, step: timedelta = timedelta(minutes=1)
) -> list[datetime]:
    """Run an injected clock from ``start`` to ``end``, firing what is due at each tick like a leader."""
    watermark, clock, fired = start, start, []
    while clock <= end:
        fire = plan_fire(schedule, watermark, clock)
        if fire is not None:
            assert fire.occurrence <= clock, "fired early"
            assert fire.occurrence > watermark, "fired backwards"
            fired.append(fire.occurrence)
            watermark = fire.occurrence
        clock += step
    return fired


# -- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "expanded"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_aliases_mean_their_five_field_form(alias: str, expanded: str) -> None:
    a, b = CronSchedule(alias), CronSchedule(expanded)
    instant = at("2026-05-17 13:27:45")
    for _ in range(5):
        nxt = a.next_after(instant)
        assert nxt == b.next_after(instant)
        assert nxt is not None
        instant = nxt


def test_named_months_and_days_in_any_case() -> None:
    named = CronSchedule("30 9 * jan-mar Mon-FRI")
    numbered = CronSchedule("30 9 * 1-3 1-5")
    instant = at("2026-01-01 00:00")
    for _ in range(30):
        nxt = named.next_after(instant)
        assert nxt == numbered.next_after(instant)
        assert nxt is not None and nxt.weekday() < 5 and nxt.month <= 3
        instant = nxt


def test_every_counts_from_the_unix_epoch() -> None:
    every = EverySchedule("15m")
    assert every.next_after(at("2026-05-17 13:07:00")) == at("2026-05-17 13:15:00")
    assert every.next_after(at("2026-05-17 13:15:00")) == at("2026-05-17 13:30:00")  # strictly later
    assert EverySchedule(timedelta(hours=1)).describe() == "every 1h"
    assert EverySchedule(90).describe() == "every 90s"


# -- refusals at declaration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"cron": "61 * * * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "* 24 * * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "*/0 * * * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "0 0 0 * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "0 0 * 13 *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "0 0 * * 8"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "5-1 * * * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "0 0 * * funday"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "* * * * * *"}, "TASK_SCHEDULE_INVALID"),  # six fields: no seconds field here
        ({"cron": "* * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": ""}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "@reboot"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "\u0661 * * * *"}, "TASK_SCHEDULE_INVALID"),  # an Arabic-Indic digit one
        ({"cron": ",".join(["1"] * 10_000) + " * * * *"}, "TASK_SCHEDULE_INVALID"),
        ({"cron": 5}, "TASK_SCHEDULE_INVALID"),
        ({"cron": "0 0 31 2 *"}, "TASK_NEVER_FIRES"),
        ({"cron": "0 0 30 2 *"}, "TASK_NEVER_FIRES"),
        ({"cron": "0 0 31 4,6,9,11 *"}, "TASK_NEVER_FIRES"),
        ({"cron": "0 0 * * *", "timezone": "Mars/Olympus_Mons"}, "TASK_ZONE_UNKNOWN"),
        ({"cron": "0 0 * * *", "timezone": "utc"}, "TASK_ZONE_UNKNOWN"),
        ({"cron": "0 0 * * *", "timezone": "../../etc/passwd"}, "TASK_ZONE_UNKNOWN"),
        ({"cron": "0 0 * * *", "timezone": ""}, "TASK_ZONE_UNKNOWN"),
        ({"cron": "0 0 * * *", "timezone": None}, "TASK_ZONE_UNKNOWN"),
        ({"every": "500ms"}, "TASK_SCHEDULE_INVALID"),
        ({"every": "soon"}, "TASK_SCHEDULE_INVALID"),
        ({"every": 0}, "TASK_SCHEDULE_INVALID"),
        ({"every": "1m", "timezone": NY}, "TASK_SCHEDULE_INVALID"),
        ({"every": "1m", "timezone": "Nowhere/Land"}, "TASK_ZONE_UNKNOWN"),
        ({"every": "1m", "cron": "* * * * *"}, "TASK_SCHEDULE_INVALID"),
        ({}, "TASK_SCHEDULE_INVALID"),
        ({"every": "1m", "catch_up": "all"}, "TASK_CATCH_UP_INVALID"),
        ({"every": "1m", "payload": [1, 2]}, "TASK_PAYLOAD_INVALID"),
        ({"every": "1m", "payload": {"scheduled_at": "x"}}, "TASK_PAYLOAD_INVALID"),
        ({"every": "1m", "payload": {"catch_up": 1}}, "TASK_PAYLOAD_INVALID"),
        ({"every": "1m", "payload": {"n": float("nan")}}, "TASK_PAYLOAD_INVALID"),
        ({"every": "1m", "tenant": None}, "JOB_TENANT_REQUIRED"),
        ({"every": "1m", "tenant": lambda p: p["org"]}, "TENANT_INVALID"),
    ],
)
def test_a_bad_task_is_refused_at_declaration(options: dict[str, Any], code: str) -> None:
    app = App(driver="memory")
    options = {"tenant": "none", **options}
    with pytest.raises(WorkhorseError) as refused:

        @app.task(name="nightly", **options)
        async def nightly(ctx: JobContext, payload: Any) -> None: ...

    error = refused.value
    assert error.code == code, error
    assert "nightly" in error.cause
    assert error.cause and error.fix
    assert app.jobs == {} and app.tasks == {}, "a refused task leaves nothing declared"


def test_a_bare_task_decorator_names_the_missing_schedule() -> None:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError) as refused:

        @app.task  # type: ignore[arg-type]
        async def sweep(ctx: JobContext, payload: Any) -> None: ...

    assert refused.value.code == "TASK_SCHEDULE_INVALID"
    assert "sweep" in refused.value.cause and "every=" in refused.value.fix


def test_never_fires_detection_and_next_stay_cheap() -> None:
    started = time.perf_counter()
    with pytest.raises(ConfigurationError):
        CronSchedule("0 0 30 2 *")
    rare = CronSchedule("0 0 * 2 mon#5")  # a fifth Monday in February: leap years starting on a Monday
    assert rare.next_after(at("2026-01-01 00:00")) == at("2044-02-29 00:00")
    assert time.perf_counter() - started < 1.0


# -- the DST policy --------------------------------------------------------------------------------


def test_a_time_skipped_by_spring_forward_runs_once_at_the_first_valid_instant() -> None:
    # 2026-03-08 in New York: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
    fired = step_through(CronSchedule("30 2 * * *", NY), at("2026-03-07 12:00"), at("2026-03-09 12:00"))
    assert [local(f, NY) for f in fired] == ["03-08 03:00 EDT", "03-09 02:30 EDT"]

    fired = step_through(CronSchedule("*/15 * * * *", NY), at("2026-03-08 06:20"), at("2026-03-08 07:40"))
    assert [local(f, NY) for f in fired] == [
        "03-08 01:30 EST",
        "03-08 01:45 EST",
        "03-08 03:00 EDT",  # 02:00, 02:15, 02:30, 02:45 do not exist: they run once, here
        "03-08 03:15 EDT",
        "03-08 03:30 EDT",
    ]


def test_a_repeated_hour_fires_once() -> None:
    # 2026-11-01 in New York: 02:00 EDT falls back to 01:00 EST; 01:00-01:59 happens twice.
    fired = step_through(CronSchedule("30 1 * * *", NY), at("2026-10-31 12:00"), at("2026-11-02 12:00"))
    assert [local(f, NY) for f in fired] == ["11-01 01:30 EDT", "11-02 01:30 EST"]

    fired = step_through(CronSchedule("0 * * * *", NY), at("2026-11-01 03:30"), at("2026-11-01 08:30"))
    assert [local(f, NY) for f in fired] == ["11-01 00:00 EDT", "11-01 01:00 EDT", "11-01 02:00 EST", "11-01 03:00 EST"]

    fired = step_through(CronSchedule("*/20 * * * *", NY), at("2026-11-01 04:50"), at("2026-11-01 07:30"))
    assert [local(f, NY) for f in fired] == [
        "11-01 01:00 EDT",
        "11-01 01:20 EDT",
        "11-01 01:40 EDT",
        "11-01 02:00 EST",  # the second 01:00-01:59 fires nothing
        "11-01 02:20 EST",
    ]


def transitions(zone: str, year: int = 2026) -> list[datetime]:
    """The instants in ``year`` where ``zone`` changes its UTC offset (an hourly scan)."""
    tz, found = ZoneInfo(zone), []
    instant = datetime(year, 1, 1, tzinfo=UTC)
    while instant.year == year:
        later = instant + timedelta(hours=1)
        if instant.astimezone(tz).utcoffset() != later.astimezone(tz).utcoffset():
            found.append(later)
        instant = later
    return found


@pytest.mark.parametrize("zone", [NY, "Europe/London", "Europe/Warsaw", "Australia/Sydney", "America/Santiago"])
@pytest.mark.parametrize("expression", ["0 2 * * *", "30 1 * * *", "0 * * * *", "*/15 * * * *"])
def test_every_wall_time_fires_exactly_once_through_each_transition(zone: str, expression: str) -> None:
    """Minute by minute through both of the zone's 2026 transitions: no exception, no wall time
    twice, every instant once and in order, and a daily schedule about a day apart (never twice a day,
    never a day skipped)."""
    schedule = CronSchedule(expression, zone)
    edges = transitions(zone)
    assert len(edges) == 2, edges
    for edge in edges:
        fired = step_through(schedule, edge - timedelta(hours=26), edge + timedelta(hours=26))
        walls = [f.astimezone(ZoneInfo(zone)).replace(tzinfo=None) for f in fired]
        assert fired == sorted(set(fired)), "each instant once, in order"
        assert len(walls) == len(set(walls)), "no wall-clock time fires twice"
        if expression in ("0 2 * * *", "30 1 * * *"):
            gaps = {round((b - a).total_seconds() / 60) for a, b in itertools.pairwise(fired)}
            assert len(fired) >= 2 and all(22 * 60 <= g <= 26 * 60 for g in gaps), gaps  # never twice, never skipped


def test_utc_schedules_ignore_the_host_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = CronSchedule("0 9 * * *").next_after(at("2026-03-08 08:59"))
    monkeypatch.setenv("TZ", NY)
    time.tzset()
    try:
        assert CronSchedule("0 9 * * *").next_after(at("2026-03-08 08:59")) == expected == at("2026-03-08 09:00")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def _instants(rng: random.Random) -> Iterator[datetime]:
    transitions = [
        at("2026-03-08 06:59:59"),
        at("2026-03-08 07:00:00"),
        at("2026-11-01 05:30:00"),
        at("2026-11-01 06:00"),
    ]
    for edge in transitions:
        for delta in (-61, -1, 0, 1, 59, 3599, 3600):
            yield edge + timedelta(seconds=delta)
    for _ in range(300):
        yield at("2026-01-01 00:00") + timedelta(
            seconds=rng.randrange(0, 366 * 86400), microseconds=rng.randrange(10**6)
        )


@pytest.mark.parametrize(
    "schedule",
    [
        CronSchedule("* * * * *", NY),
        CronSchedule("*/15 * * * *", NY),
        CronSchedule("30 1 * * *", NY),
        CronSchedule("0 2 * * *", NY),
        CronSchedule("0 9 * * mon-fri"),
        CronSchedule("@hourly", "Australia/Lord_Howe"),  # a half-hour DST shift
        EverySchedule("7s"),
    ],
    ids=lambda s: s.describe(),
)
def test_next_is_always_strictly_later_than_its_input(schedule: Any) -> None:
    for instant in _instants(random.Random(7)):
        nxt = schedule.next_after(instant)
        assert nxt is not None and nxt > instant, (instant, nxt)
        assert schedule.next_after(nxt) > nxt  # an occurrence itself is not its own next
        if instant < nxt - timedelta(microseconds=1):
            assert schedule.next_after(nxt - timedelta(microseconds=1)) == nxt


# -- catch-up ----------------------------------------------------------------------------------------


def test_nothing_due_and_an_on_time_fire() -> None:
    every = EverySchedule("1m")
    assert plan_fire(every, at("2026-05-17 10:00"), at("2026-05-17 10:00:59")) is None
    fire = plan_fire(every, at("2026-05-17 10:00"), at("2026-05-17 10:01:00.5"))
    assert fire == Fire(occurrence=at("2026-05-17 10:01"), first=at("2026-05-17 10:01"), next_at=at("2026-05-17 10:02"))
    assert not fire.missed


def test_a_gap_fires_one_job_never_a_backlog() -> None:
    hourly = CronSchedule("0 * * * *", NY)
    fire = plan_fire(hourly, at("2026-05-17 10:30"), at("2026-05-20 07:15"))  # down for three days
    assert fire is not None
    assert (fire.first, fire.occurrence, fire.next_at) == (
        at("2026-05-17 11:00"),
        at("2026-05-20 07:00"),
        at("2026-05-20 08:00"),
    )
    assert plan_fire(hourly, fire.occurrence, at("2026-05-20 07:15")) is None  # nothing left owed

    started = time.perf_counter()
    fire = plan_fire(EverySchedule("1s"), at("2025-05-17 00:00"), at("2026-05-17 00:00:00.25"))
    assert fire is not None and fire.occurrence == at("2026-05-17 00:00")
    fire = plan_fire(CronSchedule("* * * * *", NY), at("2020-01-01 00:00"), at("2026-05-17 00:00:30"))
    assert fire is not None and fire.occurrence == at("2026-05-17 00:00")
    assert time.perf_counter() - started < 1.0, "a long gap costs a bisection, not a walk"


def test_the_catch_up_policy_shapes_the_one_job() -> None:
    app = App(driver="memory")

    @app.task(name="skipper", cron="0 * * * *", tenant="none", payload={"region": "eu"})
    async def skipper(ctx: JobContext, payload: Any) -> None: ...

    @app.task(name="once", cron="0 * * * *", tenant="none", catch_up="run-once", retry=Retry(attempts=3))
    async def once(ctx: JobContext, payload: Any) -> None: ...

    gap = plan_fire(skipper.schedule, at("2026-05-17 10:30"), at("2026-05-17 14:10"))
    assert gap is not None and gap.missed
    assert skipper.payload_for(gap) == {"region": "eu", "scheduled_at": "2026-05-17T14:00:00Z"}
    assert once.payload_for(gap) == {
        "scheduled_at": "2026-05-17T14:00:00Z",
        "catch_up": {"first": "2026-05-17T11:00:00Z", "last": "2026-05-17T14:00:00Z"},
    }
    on_time = plan_fire(once.schedule, at("2026-05-17 13:30"), at("2026-05-17 14:10"))
    assert on_time is not None and once.payload_for(on_time) == {"scheduled_at": "2026-05-17T14:00:00Z"}

    job = once.build_fire(gap)
    assert (job.name, job.key, job.max_attempts, job.tenant) == ("once", "task:2026-05-17T14:00:00Z", 3, None)


# -- declarations on the app ---------------------------------------------------------------------------


async def test_a_task_is_a_job_and_can_be_enqueued_by_hand() -> None:
    app = App(driver="memory")

    @app.task(
        name="report", cron="0 6 * * *", timezone="Europe/Warsaw", tenant=lambda p: p["org"], payload={"org": "o1"}
    )
    async def report(ctx: JobContext, payload: Any) -> Any:
        return payload

    assert app.tasks == {"report": report}
    assert app.jobs["report"] is report.job
    assert report.descriptor == ("cron 0 6 * * * (Europe/Warsaw)", "Europe/Warsaw", "skip")
    ref = await report.enqueue()
    job = await app.get_job(ref.id)
    assert job is not None
    assert (job.name, job.tenant, job.payload) == ("report", "o1", {"org": "o1", "scheduled_at": None})
    other = await report.enqueue({"org": "o2", "scheduled_at": "by hand"}, key="manual")
    assert (await app.get_job(other.id)).payload["org"] == "o2"  # type: ignore[union-attr]
    await app.worker(handle_signals=False).run(burst=True)
    assert (await app.get_job(ref.id)).result == {"org": "o1", "scheduled_at": None}  # type: ignore[union-attr]


def test_two_tasks_cannot_share_a_name() -> None:
    app = App(driver="memory")

    @app.task(name="dup", every="1m", tenant="none")
    async def first(ctx: JobContext, payload: Any) -> None: ...

    with pytest.raises(ConfigurationError) as refused:

        @app.task(name="dup", every="1h", tenant="none")
        async def second(ctx: JobContext, payload: Any) -> None: ...

    assert refused.value.code == "JOB_NAME_TAKEN"
    assert app.tasks["dup"] is first


def test_the_scheduler_refuses_what_it_cannot_run() -> None:
    Scheduler(App(driver="memory"))  # built; its run is refused (test_the_memory_driver_refuses_the_role)
    app = App("postgresql://unused@127.0.0.1:1/none")
    with pytest.raises(ConfigurationError, match="half its lease"):
        Scheduler(app, lease="10s", interval="6s")
    with pytest.raises(ConfigurationError, match="at least 2s"):
        Scheduler(app, lease="1s", interval="0.5s")


def test_parse_schedule_is_what_the_decorator_uses() -> None:
    assert parse_schedule(cron="@daily", timezone=NY).describe() == f"cron @daily ({NY})"
    assert parse_schedule(every="30s").describe() == "every 30s"
    assert os.environ.get("TZ") != NY  # the host-zone test restored it


async def test_the_readme_cron_example_declares_as_written() -> None:
    section = (Path(__file__).parents[2] / "docs" / "guides" / "cron.md").read_text()
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    namespace: dict[str, Any] = {"__name__": "readme_cron"}
    exec(compile(match.group(1).replace("App()", 'App(driver="memory")'), "cron.md", "exec"), namespace)
    app = namespace["app"]
    assert sorted(app.tasks) == ["readme_cron.heartbeat", "readme_cron.morning_report", "readme_cron.sweep"]
    await namespace["by_hand"]()
    (job,) = (await app.list_jobs()).jobs
    assert job.payload == {"scheduled_at": None}


async def test_the_memory_driver_refuses_the_role() -> None:
    with pytest.raises(ConfigurationError) as refused:
        await Scheduler(App(driver="memory")).run()
    assert refused.value.code == "POSTGRES_ONLY" and "cron leadership" in refused.value.cause
