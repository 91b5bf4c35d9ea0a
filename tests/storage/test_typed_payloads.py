"""Typed payloads: the body's annotation (a pydantic model, a dataclass, a
TypedDict) is validated at enqueue, stored as JSON and handed back as that type; a stored payload
that no longer fits is dead-lettered on its first attempt."""

from __future__ import annotations

import dataclasses
import enum
import logging
from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, TypedDict

import pytest
from pydantic import BaseModel, ConfigDict, Field

from workhorse import App, JobContext, PayloadError, Retry


class Signup(BaseModel):
    org_id: str
    email: str = Field(pattern=r"@")
    seats: int = 1


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclasses.dataclass
class Address:
    city: str
    zip: str | None = None


@dataclasses.dataclass
class Invoice:
    org: str
    amount: float
    plan: Plan
    due: datetime
    lines: list[int]
    address: Address
    note: str = ""


class Ping(TypedDict):
    host: str
    tries: int
    mode: NotRequired[Literal["fast", "slow"]]


async def test_a_pydantic_model_is_validated_stored_as_json_and_handed_back(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="signup", tenant=lambda p: p.org_id)
    async def signup(ctx: JobContext, payload: Signup) -> int:
        seen.append(payload)
        return payload.seats

    ref = await signup.enqueue(Signup(org_id="o1", email="a@example.com", seats=3))
    from_dict = await signup.enqueue({"org_id": "o2", "email": "b@example.com"})  # type: ignore[arg-type]
    job = await app.get_job(ref.id)
    assert job is not None and job.payload == {"org_id": "o1", "email": "a@example.com", "seats": 3}
    assert job.tenant == "o1"  # the tenant function sees the model
    other = await app.get_job(from_dict.id)
    assert other is not None and other.payload == {"org_id": "o2", "email": "b@example.com", "seats": 1}
    await app.worker().run(burst=True)
    assert sorted((type(p).__name__, p.org_id) for p in seen) == [("Signup", "o1"), ("Signup", "o2")]
    done = await app.get_job(ref.id)
    assert done is not None and (done.state, done.result) == ("done", 3)


async def test_an_invalid_model_payload_is_refused_naming_the_field_and_nothing_is_written(app: App) -> None:
    @app.job(name="signup", tenant="none")
    async def signup(ctx: JobContext, payload: Signup) -> None:
        return None

    with pytest.raises(PayloadError) as caught:
        await signup.enqueue({"org_id": "o1", "email": "no-at-sign"})  # type: ignore[arg-type]
    assert caught.value.code == "PAYLOAD_INVALID"
    assert "$.email" in caught.value.cause and "Signup" in caught.value.cause
    with pytest.raises(PayloadError, match=r"\$\.seats"):
        await signup.enqueue_many([{"org_id": "o", "email": "a@b", "seats": "many"}])  # type: ignore[list-item]
    assert (await app.list_jobs()).jobs == []


async def test_a_dataclass_payload_round_trips_nested_types(app: App) -> None:
    seen: list[Invoice] = []

    @app.job(name="invoice", tenant=lambda p: p.org)
    def invoice(ctx: JobContext, payload: Invoice) -> str:
        seen.append(payload)
        return payload.address.city

    due = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    typed = Invoice("o1", 9.5, Plan.PRO, due, [1, 2], Address("Oslo"))
    loose = {"org": "o2", "amount": 3, "plan": "free", "due": due.isoformat(), "lines": [], "address": {"city": "Rome"}}
    refs = await invoice.enqueue_many([typed, loose])  # type: ignore[list-item]
    job = await app.get_job(refs[0].id)
    assert job is not None and job.payload == {
        "org": "o1", "amount": 9.5, "plan": "pro", "due": "2030-01-02T03:04:00+00:00", "lines": [1, 2],
        "address": {"city": "Oslo", "zip": None}, "note": "",
    }  # fmt: skip
    await app.worker().run(burst=True)
    assert seen[0] == typed or seen[1] == typed
    second = next(p for p in seen if p.org == "o2")
    assert (second.amount, second.plan, second.due, second.address) == (3.0, Plan.FREE, due, Address("Rome"))


GOOD = {"org": "o", "amount": 1, "plan": "pro", "due": "2030-01-01", "lines": [], "address": {"city": "x"}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"address": None}, "$.address"),
        ({"amount": "1"}, "$.amount"),
        ({"plan": "gold"}, "$.plan"),
        ({"due": "never"}, "$.due"),
        ({"lines": [1, True]}, "$.lines[1]"),
        ({"address": {"city": "x", "town": "y"}}, "$.address.town"),
        ({"address": {"city": 5}}, "$.address.city"),
    ],
)
async def test_a_dataclass_payload_is_refused_naming_the_field(app: App, change: Any, field: str) -> None:
    @app.job(name="invoice", tenant="none")
    def invoice(ctx: JobContext, payload: Invoice) -> None:
        return None

    payload = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(PayloadError) as caught:
        await invoice.enqueue(payload)  # type: ignore[arg-type]
    assert caught.value.code == "PAYLOAD_INVALID"
    assert f"field {field}:" in caught.value.cause
    assert (await app.list_jobs()).jobs == []


async def test_a_typeddict_payload_checks_keys_and_types(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="ping", tenant="none")
    async def ping(ctx: JobContext, payload: Ping) -> None:
        seen.append(payload)

    await ping.enqueue({"host": "a", "tries": 2})
    await ping.enqueue({"host": "b", "tries": 1, "mode": "fast"}, key="b")
    for bad, field in [({"host": "a"}, "$.tries"), ({"host": "a", "tries": 1, "mode": "warp"}, "$.mode")]:
        with pytest.raises(PayloadError) as caught:
            await ping.enqueue(bad)  # type: ignore[arg-type]
        assert f"field {field}:" in caught.value.cause
    await app.worker().run(burst=True)
    assert sorted(p["host"] for p in seen) == ["a", "b"]


async def test_a_stored_payload_that_no_longer_fits_is_dead_lettered_at_once(app: App) -> None:
    runs: list[Any] = []

    @app.job(name="signup", tenant="none", retry=Retry(attempts=5, base=0))
    async def signup(ctx: JobContext, payload: Signup) -> None:
        runs.append(payload)

    row = signup.build(Signup(org_id="o1", email="a@b"))
    old = dataclasses.replace(row, payload='{"org_id": "o1", "mail": "a@b"}')  # a row from an older model
    (ref,) = await app.driver.enqueue_many([old])
    stats = await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert job.last_error is not None and "PAYLOAD_INVALID" in job.last_error["message"]
    assert "$.email" in job.last_error["message"] and runs == []
    assert stats.claimed == 1


async def test_untyped_bodies_behave_as_before(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="plain", tenant="none")
    async def plain(ctx, payload):  # type: ignore[no-untyped-def]
        seen.append(payload)

    @app.job(name="mapping", tenant="none")
    async def mapping(ctx: JobContext, payload: dict[str, Any]) -> None:
        seen.append(payload)

    @app.job(name="anything", tenant="none")
    async def anything(ctx: JobContext, payload: Any) -> None:
        seen.append(payload)

    await plain.enqueue({"a": 1})
    await mapping.enqueue({"b": 2})
    await anything.enqueue([3])
    await app.worker().run(burst=True)
    assert sorted(map(str, seen)) == ["[3]", "{'a': 1}", "{'b': 2}"]
    assert plain.payload_type is None and mapping.payload_type is None and anything.payload_type is None


async def test_an_unresolvable_annotation_falls_back_to_json_with_a_warning(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.job(name="ghost", tenant="none")
    async def ghost(ctx: JobContext, payload: NotImported) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with caplog.at_level(logging.WARNING, logger="workhorse.typed"):
        await ghost.enqueue({"x": 1})
    assert ghost.payload_type is None
    assert any("NotImported" in r.getMessage() for r in caplog.records)


async def test_queue_overrides_the_declaration_per_call(app: App) -> None:
    @app.job(name="mail", queue="emails", tenant="none")
    async def mail(ctx: JobContext, payload: dict[str, int]) -> None:
        return None

    one = await mail.enqueue({"n": 1}, queue="bulk")
    many = await mail.enqueue_many([{"n": 2}, {"n": 3}], queue="bulk")
    keyed = await mail.enqueue_many([{"n": 4}], keys=["k"], queue="bulk")
    plain = await mail.enqueue({"n": 5})
    queues = [(await app.get_job(r.id)).queue for r in [one, *many, *keyed, plain]]  # type: ignore[union-attr]
    assert queues == ["bulk", "bulk", "bulk", "bulk", "emails"]
    with pytest.raises(Exception, match="queue= of an enqueue"):
        await mail.enqueue({"n": 1}, queue="")
    stats = await app.worker(queues=["bulk"]).run(burst=True)
    assert stats.completed == 4


@dataclasses.dataclass
class Order:
    net: int
    vat: int
    gross: int = dataclasses.field(init=False)  # derived: not part of what is stored or built

    def __post_init__(self) -> None:
        self.gross = self.net + self.vat


class StrictEvent(BaseModel):
    model_config = ConfigDict(strict=True)
    at: datetime
    ids: tuple[int, int]


async def test_a_dataclass_with_a_derived_field_and_a_strict_model_run_as_enqueued(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="order", tenant="none", retry=Retry(attempts=3, base=0))
    async def order(ctx: JobContext, payload: Order) -> None:
        seen.append(payload)

    @app.job(name="strict", tenant="none", retry=Retry(attempts=3, base=0))
    async def strict(ctx: JobContext, payload: StrictEvent) -> None:
        seen.append(payload)

    when = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
    first = await order.enqueue(Order(net=100, vat=20))
    second = await strict.enqueue(StrictEvent(at=when, ids=(1, 2)))
    await app.worker().run(burst=True)
    for ref in (first, second):
        job = await app.get_job(ref.id)
        assert job is not None and job.state == "done", job.last_error if job else None
    assert seen[0] == Order(net=100, vat=20) and seen[0].gross == 120
    assert seen[1] == StrictEvent(at=when, ids=(1, 2))
