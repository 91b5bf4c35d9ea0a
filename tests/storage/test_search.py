"""Searching jobs by a payload field or an error's text (issue 29): containment
as jsonb's ``@>``, error text in any case with LIKE's characters meaning themselves, combined with
the list's filters, refused when malformed, and read on a walk bounded per page whose ``next`` goes
on from the last row examined."""

from __future__ import annotations

from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, TerminalError
from workhorse.drivers import postgres_operate, searching
from workhorse.search import parse_payload_search


async def seeded(app: App) -> dict[str, list[str]]:
    @app.job(name="shop.charge", tenant="none")
    async def charge(ctx: JobContext, payload: dict[str, Any]) -> None:
        if payload.get("fail"):
            raise TerminalError(payload["fail"])

    orders = [{"order": i, "customer": {"id": i % 3, "tags": ["vip"] if i == 4 else []}} for i in range(6)]
    ok = await charge.enqueue_many(orders)
    failing = await charge.enqueue_many(
        [
            {"order": 100, "fail": "Card DECLINED by issuer"},
            {"order": 101, "fail": "gateway timed out after 30s"},
            {"order": 102, "fail": "100% of the quota used (limit_per_day)"},
        ]
    )
    await app.worker().run(burst=True)
    return {"ok": [r.id for r in ok], "failing": [r.id for r in failing]}


async def ids(app: App, **search: Any) -> list[str]:
    return [j.id for j in (await app.admin.list(**search)).jobs]


async def test_a_payload_field_and_an_errors_text_find_their_jobs(app: App) -> None:
    made = await seeded(app)
    ok, failing = made["ok"], made["failing"]
    assert await ids(app, payload={"order": 4}) == [ok[4]]
    assert await ids(app, payload={"customer": {"id": 1}}) == [ok[4], ok[1]]  # newest first
    assert await ids(app, payload={"customer": {"tags": ["vip"]}}) == [ok[4]]
    assert await ids(app, payload={"order": "4"}) == []  # a string is no number
    assert await ids(app, error="declined") == [failing[0]]  # any case
    assert await ids(app, error="TerminalError") == failing[::-1]  # the type too
    assert await ids(app, error="100%") == [failing[2]]  # LIKE's characters mean themselves
    assert await ids(app, error="limit_per") == [failing[2]]
    assert await ids(app, error="0% of") == [failing[2]]
    assert await ids(app, error="%") == [failing[2]]
    assert await ids(app, error="timed", payload={"order": 101}) == [failing[1]]
    assert await ids(app, error="timed", state="done") == []  # with the list's filters
    page = await app.admin.list(error="issuer", state="dead")
    assert [j.id for j in page.jobs] == [failing[0]] and page.scanned == 3 and page.next is None
    assert page.to_dict()["scanned"] == 3
    assert "scanned" not in (await app.admin.list(state="dead")).to_dict()  # only a search says it


@pytest.mark.parametrize(
    ("search", "what"),
    [
        ({"payload": {}}, "at least one field"),
        ({"payload": [1, 2]}, "JSON object"),
        ({"payload": {"x": float("nan")}}, "not JSON"),
        ({"error": ""}, "1 to 200 characters"),
        ({"error": "x" * 201}, "1 to 200 characters"),
        ({"error": 7}, "1 to 200 characters"),
    ],
)
async def test_a_malformed_search_is_refused(app: App, search: dict[str, Any], what: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await app.admin.list(**search)
    assert caught.value.code == "SEARCH_INVALID" and what in caught.value.cause and "--payload" in caught.value.fix


def test_a_persons_payload_search() -> None:
    assert parse_payload_search("order=42") == {"order": 42}
    assert parse_payload_search('order="42"') == {"order": "42"}
    assert parse_payload_search("customer.id=7") == {"customer": {"id": 7}}
    assert parse_payload_search("email=ada@example.com") == {"email": "ada@example.com"}
    assert parse_payload_search("flag=true") == {"flag": True}
    assert parse_payload_search(' {"a": {"b": [1]}} ') == {"a": {"b": [1]}}
    for bad in ("order", "=4", "a..b=1", "{nope", "[1]"):
        with pytest.raises(ConfigurationError) as caught:
            parse_payload_search(bad)
        assert caught.value.code == "SEARCH_INVALID", bad


async def test_each_page_of_a_search_walks_a_bounded_number_of_rows(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (searching, postgres_operate):
        monkeypatch.setattr(module, "SEARCH_SCAN", 10)

    @app.job(name="bulk.item", tenant="none")
    async def item(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    older = await item.enqueue_many([{"wanted": True, "n": i} for i in range(5)])
    await item.enqueue_many([{"wanted": False, "n": i} for i in range(25)])
    found: list[str] = []
    after: str | None = None
    scanned: list[int] = []
    for _ in range(10):
        page = await app.admin.list(payload={"wanted": True}, limit=3, after=after)
        assert page.scanned is not None and page.scanned <= 10
        scanned.append(page.scanned)
        found += [j.id for j in page.jobs]
        if page.next is None:
            break
        after = page.next
    assert found == [r.id for r in reversed(older)]  # every hit once, newest first, over bounded pages
    assert scanned[:3] == [10, 10, 10]  # three pages walked past 25 non-matching rows to reach them
    # and back: a page read `before` a cursor walks bounded too, newest first
    back = await app.admin.list(payload={"wanted": True}, limit=3, before=found[-1])
    assert [j.id for j in back.jobs] == found[-4:-1] and back.scanned is not None and back.scanned <= 10
