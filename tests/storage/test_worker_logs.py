"""The worker talks (issue 16): one INFO record per attempt's outcome with the job's fields, its
start at DEBUG, a body's ctx.logger records carrying the job; and the json format's lines."""

from __future__ import annotations

import json
import logging

import pytest

from workhorse import App, JobContext, Retry, TerminalError
from workhorse.ids import short_id
from workhorse.logs import JOB_FIELDS, JsonFormatter, TextFormatter


async def test_every_outcome_is_one_record_with_the_jobs_fields(app: App, caplog: pytest.LogCaptureFixture) -> None:
    @app.job(name="speaks", tenant="none", retry=Retry(attempts=2, base=0, jitter=False))
    async def speaks(ctx: JobContext, payload: str) -> str:
        ctx.logger.info("working on %s", payload)
        if payload == "flaky" and ctx.attempt == 1:
            raise ValueError("first try fails")
        if payload == "doomed":
            raise TerminalError("no way")
        return payload

    refs = {p: (await speaks.enqueue(p)).id for p in ("fine", "flaky", "doomed")}
    with caplog.at_level(logging.DEBUG, logger="workhorse"):
        await app.worker(concurrency=3).run(burst=True)
    outcomes = [r for r in caplog.records if r.name == "workhorse.worker" and hasattr(r, "outcome")]
    by_job: dict[str, list[logging.LogRecord]] = {}
    for r in outcomes:
        by_job.setdefault(r.job_id, []).append(r)  # type: ignore[attr-defined]
    assert [r.outcome for r in by_job[refs["fine"]]] == ["done"]  # type: ignore[attr-defined]
    assert [r.outcome for r in by_job[refs["flaky"]]] == ["retry", "done"]  # type: ignore[attr-defined]
    assert [r.outcome for r in by_job[refs["doomed"]]] == ["dead"]  # type: ignore[attr-defined]
    retry = by_job[refs["flaky"]][0]
    assert retry.levelno == logging.INFO and retry.error_type == "ValueError"  # type: ignore[attr-defined]
    assert "first try fails" in retry.getMessage() and retry.attempt == 1  # type: ignore[attr-defined]
    # a person reads the short id every command takes; the job_id field keeps the whole id (issue 29)
    assert retry.getMessage().startswith(f"job {short_id(refs['flaky'])} speaks failed, retrying")
    assert all(r.job_id not in r.getMessage() for r in outcomes)  # type: ignore[attr-defined]
    assert all(r.queue == "default" and r.job == "speaks" and r.duration_ms >= 0 for r in outcomes)  # type: ignore[attr-defined]
    starts = [r for r in caplog.records if r.levelno == logging.DEBUG and "started" in r.getMessage()]
    assert len(starts) == 4  # fine, flaky twice, doomed
    mine = [r for r in caplog.records if r.name == "workhorse.job.speaks"]
    assert {(r.job_id, r.attempt) for r in mine} == {  # type: ignore[attr-defined]
        (refs["fine"], 1),
        (refs["flaky"], 1),
        (refs["flaky"], 2),
        (refs["doomed"], 1),
    }


def test_the_json_format_writes_one_object_a_line_with_the_fields_as_keys() -> None:
    record = logging.LogRecord("workhorse.worker", logging.INFO, __file__, 1, "job %s done", ("x",), None)
    for key, value in {"job_id": "x", "job": "speaks", "queue": "q", "attempt": 2, "outcome": "done"}.items():
        setattr(record, key, value)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "job x done" and line["level"] == "INFO" and line["logger"] == "workhorse.worker"
    assert line["ts"].endswith("Z")
    assert {k: line[k] for k in ("job_id", "job", "queue", "attempt", "outcome")} == {
        "job_id": "x",
        "job": "speaks",
        "queue": "q",
        "attempt": 2,
        "outcome": "done",
    }
    assert set(line) <= {"ts", "level", "logger", "message", "exception", *JOB_FIELDS}
    body = logging.LogRecord("workhorse.job.speaks", logging.INFO, __file__, 1, "hello", (), None)
    body.job_id, body.attempt = "01a24200-ab0b-7662-82f2-2f945d1d2f3e", 3
    assert TextFormatter().format(body).endswith("hello  [job 00ab0b6622f2 attempt 3]")


def test_the_text_format_shows_control_characters_instead_of_sending_them() -> None:
    """A body's error message from a third party's API may hold ESC ]0; (set the window title) or
    ESC [2J (clear the screen): the text log line shows them escaped; newlines and tabs stay."""
    hostile = "from-api \x1b]0;owned\x07 \x1b[2J \x9b tail"
    record = logging.LogRecord("workhorse.worker", logging.WARNING, __file__, 1, "job failed: %s", (hostile,), None)
    line = TextFormatter().format(record)
    assert "\x1b" not in line and "\x07" not in line and "\x9b" not in line
    assert "from-api \\x1b]0;owned\\x07 \\x1b[2J \\x9b tail" in line
    record = logging.LogRecord("workhorse.worker", logging.INFO, __file__, 1, "a\tb\nc", (), None)
    assert TextFormatter().format(record).endswith("a\tb\nc")
