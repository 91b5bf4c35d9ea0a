"""Flow-control declarations (``Concurrency``, ``Limits``, ``Rate``, ``App(limits=)``,
``@app.job(concurrency=)``): every bad number or type is refused at construction with
CONFIG_INVALID, naming the value and a fix; 0 is accepted (a hard stop). A bad concurrency key
is refused at enqueue with nothing written, and the memory driver (a test double) enforces
the caps."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from workhorse import App, Concurrency, ConfigurationError, JobContext, Limits, Rate
from workhorse.testing import drain, memory

BAD_NUMBERS: list[Any] = [-1, -100, 2.0, 1.5, math.nan, math.inf, -math.inf, True, False, "2", None, [2], {"n": 2}]
BAD_COUNTS = [v for v in BAD_NUMBERS if v is not None]  # None means "no cap" where a cap is optional


async def body(ctx: JobContext, payload: object) -> None:
    return None


def refused(build: Callable[[], object], offending: object) -> ConfigurationError:
    """Run build, which must refuse with CONFIG_INVALID naming the offending value and a fix."""
    with pytest.raises(ConfigurationError) as caught:
        build()
    error = caught.value
    assert error.code == "CONFIG_INVALID"
    assert repr(offending) in error.cause, error.cause
    assert error.fix.strip()
    return error


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_concurrency_limit_refusals(value: Any) -> None:
    refused(lambda: Concurrency(value), value)
    refused(lambda: Concurrency(value, key=lambda p: "k"), value)


@pytest.mark.parametrize("key", ["acct", 7, object()])
def test_concurrency_key_must_be_callable(key: Any) -> None:
    refused(lambda: Concurrency(1, key=key), key)


@pytest.mark.parametrize("when_busy", ["never", "", "FAIL", None, 1, True])
def test_concurrency_when_busy_refusals(when_busy: Any) -> None:
    refused(lambda: Concurrency(1, key=lambda p: "k", when_busy=when_busy), when_busy)


def test_when_busy_fail_without_a_key_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Concurrency(1, when_busy="fail")
    assert caught.value.code == "CONFIG_INVALID"
    assert "when_busy='fail'" in caught.value.cause and "key=" in caught.value.fix


@pytest.mark.parametrize("value", BAD_COUNTS)
@pytest.mark.parametrize("field", ["per_tenant", "total", "per_queue"])
def test_limits_number_refusals(field: str, value: Any) -> None:
    if field == "per_queue" and isinstance(value, dict):
        value = {"q": -1}  # a dict is per_queue's by-queue form: its bad value is what is named
        refused(lambda: Limits(per_queue=value), -1)
        return
    refused(lambda: Limits(**{field: value}), value)


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_limits_per_queue_dict_value_refusals(value: Any) -> None:
    error = refused(lambda: Limits(per_queue={"emails": 3, "q": value}), value)
    assert "'q'" in error.cause


@pytest.mark.parametrize("queue", ["", 3, None, ("a",)])
def test_limits_per_queue_dict_key_refusals(queue: Any) -> None:
    refused(lambda: Limits(per_queue={queue: 1}), queue)


@pytest.mark.parametrize("rate", [5, (3, "1s"), "10/s", {"n": 3}, 1.5])
def test_limits_rate_must_be_a_rate(rate: Any) -> None:
    refused(lambda: Limits(rate_per_tenant=rate), rate)


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_rate_n_refusals(value: Any) -> None:
    refused(lambda: Rate(value, per="1s"), value)


@pytest.mark.parametrize("per", [0, "0s", -1, math.nan, math.inf, True, "soon", "0.5ms", 0.0001, None])
def test_rate_per_refusals(per: Any) -> None:
    refused(lambda: Rate(3, per=per), per)


@pytest.mark.parametrize("limits", [{"total": 3}, 5, "total=3", Rate(3), Concurrency(2)])
def test_app_limits_must_be_limits(limits: Any) -> None:
    refused(lambda: App(driver="memory", limits=limits), limits)


@pytest.mark.parametrize("value", [*BAD_COUNTS, "fail"])
def test_job_concurrency_refusals_register_nothing(value: Any) -> None:
    app = App(driver="memory")
    error = refused(lambda: app.job(name="capped", tenant="none", concurrency=value)(body), value)
    assert "capped" in error.cause
    assert app.jobs == {}


def test_zero_is_accepted_everywhere() -> None:
    assert Concurrency(0).limit == 0
    assert Concurrency(0, key=lambda p: "k", when_busy="fail").limit == 0
    assert Rate(0, per="1s").n == 0
    limits = Limits(per_tenant=0, per_queue=0, total=0, rate_per_tenant=Rate(0))
    assert (limits.per_tenant, limits.per_queue, limits.total) == (0, 0, 0)
    assert Limits(per_queue={"q": 0}).per_queue == {"q": 0}
    app = App(driver="memory", limits=limits)
    assert app.limits is limits
    handle = app.job(name="stopped", tenant="none", concurrency=0)(body)
    assert handle.concurrency is not None and handle.concurrency.limit == 0


def test_good_declarations_keep_their_values() -> None:
    def key(p: Any) -> str:
        return str(p["acct"])

    c = Concurrency(3, key=key, when_busy="fail")
    assert (c.limit, c.key, c.when_busy) == (3, key, "fail")
    assert Concurrency(2).when_busy == "wait" and Concurrency(2).key is None
    r = Rate(10, per="250ms")
    assert (r.n, r.per) == (10, 0.25)
    limits = Limits(per_tenant=5, per_queue={"emails": 20}, total=100, rate_per_tenant=r)
    assert limits.per_queue == {"emails": 20} and limits.rate_per_tenant is r and not limits.empty
    assert Limits().empty


# -- the key function, at enqueue ---------------------------------------------------------------


def _raises(p: Any) -> str:
    raise KeyError("acct")


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        (lambda p: "", "''"),
        (lambda p: 42, "42"),
        (lambda p: None, "None"),
        (lambda p: "k" * 201, "k" * 201),
        (lambda p: "a\x00b", "a\\x00b"),
        (_raises, "KeyError"),
    ],
)
async def test_a_bad_key_is_refused_at_enqueue_and_nothing_is_written(
    memory_app: App, key: Callable[[Any], Any], shown: str
) -> None:
    @memory_app.job(name="keyed", tenant="none", concurrency=Concurrency(1, key=key))
    async def keyed(ctx: JobContext, payload: Any) -> None:
        return None

    @memory_app.job(name="other", tenant="none")
    async def other(ctx: JobContext, payload: Any) -> None:
        return None

    await other.enqueue({"acct": "x"})  # a job the refusals must leave alone
    before = await memory_app.list_jobs()
    assert len(before.jobs) == 1
    for enqueue in (
        lambda: keyed.enqueue({"acct": "a"}),
        lambda: keyed.enqueue_many([{"acct": "a"}, {"acct": "b"}]),
    ):
        with pytest.raises(ConfigurationError) as caught:
            await enqueue()
        assert caught.value.code == "CONFIG_INVALID"
        assert shown in caught.value.cause and "keyed" in caught.value.cause
        assert caught.value.fix.strip()
    after = await memory_app.list_jobs()
    assert [j.id for j in after.jobs] == [j.id for j in before.jobs]


async def test_a_key_of_200_characters_is_stored(memory_app: App) -> None:
    @memory_app.job(name="keyed", tenant="none", concurrency=Concurrency(1, key=lambda p: "k" * 200))
    async def keyed(ctx: JobContext, payload: Any) -> None:
        return None

    ref = await keyed.enqueue(None)
    assert (await memory_app.get_job(ref.id)) is not None


# -- the memory driver (a test double) enforces the caps (tests/contract/test_contract_flow.py has the rest)


@pytest.mark.parametrize(
    ("declare", "runs"),
    [
        ({"concurrency": 0}, 0),
        ({"concurrency": Concurrency(0, key=lambda p: "k", when_busy="fail")}, 0),
        ({"limits": Limits(total=0)}, 0),
        ({"limits": Limits(rate_per_tenant=Rate(1, per="1h"))}, 1),
    ],
)
async def test_the_memory_driver_enforces_a_cap(declare: dict[str, Any], runs: int) -> None:
    app = App(driver="memory", limits=declare.get("limits"))
    ran: list[int] = []

    @app.job(name="capped", tenant=lambda p: "t", concurrency=declare.get("concurrency"))
    async def capped(ctx: JobContext, payload: int) -> None:
        ran.append(payload)

    refs = await capped.enqueue_many([1, 2, 3])
    stats = await app.worker().run(burst=True)
    assert len(ran) == runs and stats.completed == runs
    jobs = [await app.get_job(ref.id) for ref in refs]
    held = [(j.state, j.attempt, j.last_error) for j in jobs if j is not None and j.state != "done"]
    assert held == [("ready", 0, None)] * (3 - runs)  # held back uncounted: ready, unspent, no error


async def test_a_rate_window_slides_on_the_memory_drivers_clock() -> None:
    """The window is measured by the driver's clock (with RATE_SLACK, 5% of ``per``), so a test moves
    it instead of sleeping; drain moves the clock only to due times, never past a rate."""
    app = App(driver="memory", limits=Limits(rate_per_tenant=Rate(1, per="1h")))
    ran: list[int] = []

    @app.job(name="call_api", tenant=lambda p: "t")
    async def call_api(ctx: JobContext, payload: int) -> None:
        ran.append(payload)

    with memory(app) as clock:
        await call_api.enqueue_many([1, 2])
        await drain(app)
        assert ran == [1]
        clock.advance("62m")  # inside the window of 1h and its slack
        await drain(app)
        assert ran == [1]
        clock.advance("2m")
        await drain(app)
        assert ran == [1, 2]
