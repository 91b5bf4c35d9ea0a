"""Fuzz every duration a person writes (issue 27): a job's delay, a task's every=, a stats window,
retry delays, a step's sleep and timeout, and the CLI's --since and --created-from. Each ends in a
refusal with a code (never a raw OverflowError or ValueError), or in a span no further than
``LONGEST`` whose instants every tool can compute and print."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from click.testing import CliRunner
from fuzzkit import FUZZ, Loop, declare_echo, durations, refusal, text
from hypothesis import event, given
from hypothesis import strategies as st

from workhorse import App, Retry
from workhorse.cli import cli
from workhorse.durations import LONGEST
from workhorse.leader.tasks import EverySchedule

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@FUZZ
@given(duration=durations)
def test_a_duration_is_refused_with_a_code_or_bounded(duration: Any) -> None:
    app = App(driver="memory")
    try:
        delay = declare_echo(app).build({"t": "acme"}, delay=duration).delay
        assert 0 <= delay <= LONGEST.total_seconds()
        assert (NOW + timedelta(seconds=delay)).year <= 9999
        event("delay taken")
    except Exception as error:
        event(f"delay {refusal(error).code}")
    try:
        schedule = EverySchedule(duration, task="fuzz.tick")
        nxt = schedule.next_after(NOW)
        assert NOW < nxt <= NOW + LONGEST and schedule.latest_until(NOW, nxt) <= nxt
        assert schedule.describe()
    except Exception as error:
        event(f"every {refusal(error).code}")
    try:
        Retry(base=duration, max_delay=duration)
    except Exception as error:
        refusal(error)


@FUZZ
@given(duration=durations)
def test_a_stats_window_is_refused_with_a_code_or_read(loop: Loop, duration: Any) -> None:
    app = App(driver="memory")
    try:
        loop.run(app.admin.stats(duration))
    except Exception as error:
        event(refusal(error).code)


@FUZZ
@given(
    option=st.sampled_from(["stats --since", "ls --created-from", "ls --created-to"]),
    value=st.one_of(
        text,
        st.sampled_from(["99999999d", "36525d", "1e12", "9" * 30, "0001-01-01T00:00Z", "9999-12-31T23:59:59+14:00"]),
    ),
)
def test_the_cli_refuses_a_time_it_cannot_read_with_a_code(
    database_url: str, fuzz_app: App, fuzz_schema: str, option: str, value: str
) -> None:
    """Exit 0, or exit 2 with one refusal document on stdout; never exit 1 (a traceback)."""
    if "\x00" in value:
        value = value.replace("\x00", "")  # no operating system passes a NUL in an argument
    command, flag = option.split()
    args = ["--database-url", database_url, "--schema", fuzz_schema, command, flag, value, "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    if result.exit_code == 2 and result.stdout.startswith("{"):
        assert '"code"' in result.stdout and "DATABASE" not in result.stdout, result.stdout
    event(f"exit {result.exit_code}")
