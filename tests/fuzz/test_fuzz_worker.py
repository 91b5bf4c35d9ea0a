"""Fuzz what a job's body hands the worker (issue 27): its result, its exception (message, type,
an unreadable ``__str__``), its progress message, its step names and step results, and events it
publishes. Each run is settled (done, or dead-lettered with a code), its stored values read back,
and a plain job enqueued beside it is settled too: one bad value never holds back other outcomes.

The hostile half draws NUL and lone surrogates into everything the worker writes, results that
cannot be stored, and an exception whose ``__str__`` raises: the worker makes its own text storable
(``workhorse.storable``), dead-letters a result it cannot store (RESULT_INVALID) and records an
unreadable message by the exception's type.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from fuzzkit import FUZZ, Loop, durations, json_values, payloads, refusal, same, storable_json, storable_text, text
from hypothesis import event, given, settings
from hypothesis import strategies as st

from workhorse import App, JobContext, Retry, TerminalError


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this message cannot be read")


@dataclass
class Behaviour:
    result: Any = None
    message: str | None = None  # raise with this message ...
    kind: str = "runtime"  # ... as a RuntimeError, TerminalError or Unreadable
    progress: str | None = None
    step: str | None = None
    step_result: Any = None


BEHAVIOURS: dict[int, Behaviour] = {}


def _declare(app: App) -> tuple[Any, Any]:
    if "fuzz.body" in app.jobs:
        return app.jobs["fuzz.body"], app.jobs["fuzz.plain"]

    @app.job(name="fuzz.body", tenant="none", retry=Retry(attempts=1))
    async def body(ctx: JobContext, payload: dict[str, int]) -> Any:
        b = BEHAVIOURS[payload["n"]]
        if b.progress is not None:
            ctx.progress(0.5, b.progress)
        if b.step is not None:
            await ctx.step.run(b.step, lambda: b.step_result)
        if b.message is not None:
            if b.kind == "terminal":
                raise TerminalError(b.message)
            raise Unreadable() if b.kind == "unreadable" else RuntimeError(b.message)
        return b.result

    @app.job(name="fuzz.plain", tenant="none")
    async def plain(ctx: JobContext, payload: None) -> str:
        return "ok"

    return body, plain


def _run(app: App, loop: Loop, behaviour: Behaviour) -> None:
    body, plain = _declare(app)
    number = len(BEHAVIOURS)
    BEHAVIOURS[number] = behaviour

    async def go() -> None:
        bad = (await body.enqueue({"n": number})).id
        good = (await plain.enqueue(None)).id
        await asyncio.wait_for(app.worker(concurrency=2).run(burst=True), timeout=30)
        settled = await app.admin.get(good)
        assert settled is not None and settled.state == "done", settled
        job = await app.admin.get(bad)
        assert job is not None and job.state in ("done", "dead"), job
        event(job.state)
        if job.state == "done":
            assert behaviour.message is None
            assert same(behaviour.result, job.result), (behaviour.result, job.result)
        else:
            assert job.last_error is not None and (job.last_error.get("type") or job.last_error.get("code"))
        for done in (bad, good):
            await app.admin.remove(done)

    loop.run(go())


behaviours = st.builds(
    Behaviour,
    result=st.one_of(storable_json),
    message=st.one_of(st.none(), storable_text),
    kind=st.sampled_from(["runtime", "terminal"]),
    progress=st.one_of(st.none(), storable_text),
    step=st.one_of(st.none(), storable_text),
    step_result=storable_json,
)
hostile_behaviours = st.builds(
    Behaviour,
    result=st.one_of(json_values, payloads),
    message=st.one_of(st.none(), text),
    kind=st.sampled_from(["runtime", "terminal"]),
    progress=st.one_of(st.none(), text),
    step=st.one_of(st.none(), text),
    step_result=json_values,
)


@settings(FUZZ, max_examples=20)  # a worker run each
@given(behaviour=behaviours)
def test_a_body_with_storable_values_is_settled_and_reads_back(fuzz_app: App, loop: Loop, behaviour: Behaviour) -> None:
    _run(fuzz_app, loop, behaviour)


@settings(FUZZ, max_examples=30)
@given(behaviour=hostile_behaviours)
def test_a_body_with_any_value_is_settled_and_others_with_it(fuzz_app: App, loop: Loop, behaviour: Behaviour) -> None:
    _run(fuzz_app, loop, behaviour)


@settings(FUZZ, max_examples=10)
@given(behaviour=hostile_behaviours.map(lambda b: Behaviour(b.result, "-", "unreadable", b.progress, b.step)))
def test_an_exception_whose_message_cannot_be_read_is_settled(fuzz_app: App, loop: Loop, behaviour: Behaviour) -> None:
    _run(fuzz_app, loop, behaviour)


@FUZZ
@given(
    name=st.one_of(st.just("order.shipped"), text),
    payload=st.one_of(st.none(), payloads),
    key=st.one_of(st.none(), st.just("7"), text),
    ttl=st.one_of(st.just("7d"), durations),
    which=st.sampled_from(["name", "payload", "key", "ttl", "all"]),
)
def test_an_event_is_refused_with_a_code_or_published(
    fuzz_app: App, loop: Loop, name: str, payload: Any, key: Any, ttl: Any, which: str
) -> None:
    """One field drawn hostile at a time (``which``), the others ordinary; or all of them."""
    plain = {"name": "order.shipped", "payload": None, "key": "7", "ttl": "7d"}
    drawn = {"name": name, "payload": payload, "key": key, "ttl": ttl}
    chosen = drawn if which == "all" else {**plain, which: drawn[which]}
    try:
        loop.run(fuzz_app.publish_event(chosen["name"], chosen["payload"], key=chosen["key"], ttl=chosen["ttl"]))
        event("published")
    except Exception as error:
        event(refusal(error).code)
