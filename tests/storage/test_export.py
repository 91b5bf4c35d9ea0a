"""``app.admin.export``: one tenant's jobs as keyset pages. Pages in order cover
exactly the tenant's jobs, newest first, and never a row of another tenant (names that share a
prefix, differ in case or hold LIKE wildcards) or a job with no tenant; the state filter; page
sizes at their boundaries; every refusal, raised at the call."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext
from workhorse.errors import WorkhorseError
from workhorse.export import ExportPage, export_pages
from workhorse.types import ListFilter, Page

# Tenants a sloppy filter would mix up: shared prefixes, case, trailing space, LIKE wildcards.
TENANTS = ["acme", "acme-2", "acm", "ACME", "acme ", "ac%", "ac_e", "émigré"]


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="export.work", tenant=lambda p: p["t"])
    async def work(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    @app.job(name="export.untenanted", tenant="none")
    async def untenanted(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    return work, untenanted


async def pages_of(app: App, tenant: str, **options: Any) -> list[ExportPage]:
    return [page async for page in app.admin.export(tenant=tenant, **options)]


def ids_of(pages: list[ExportPage]) -> list[str]:
    return [job.id for page in pages for job in page.jobs]


async def seed(app: App, per_tenant: int = 4) -> tuple[dict[str, list[str]], list[str]]:
    """``per_tenant`` jobs for each of TENANTS (interleaved, so no tenant's ids are contiguous) and
    as many with no tenant; answers the ids by tenant and the untenanted ids."""
    work, untenanted = declare(app)
    by_tenant: dict[str, list[str]] = {t: [] for t in TENANTS}
    none: list[str] = []
    for i in range(per_tenant):
        refs = await work.enqueue_many([{"t": t, "i": i} for t in TENANTS])
        for t, ref in zip(TENANTS, refs, strict=True):
            by_tenant[t].append(ref.id)
        none.append((await untenanted.enqueue({"i": i})).id)
    return by_tenant, none


def check_links(pages: list[ExportPage], tenant: str, state: str | None, size: int) -> None:
    """Pages numbered from 1; every page but the last full, its ``next`` its last id; the last's None."""
    assert [p.number for p in pages] == list(range(1, len(pages) + 1))
    for page in pages:
        assert (page.tenant, page.state) == (tenant, state)
        assert all(job.tenant == tenant for job in page.jobs)
    for page in pages[:-1]:
        assert len(page.jobs) == size
        assert page.next == page.jobs[-1].id
    assert pages[-1].next is None
    assert 0 <= len(pages[-1].jobs) <= size


# -- only the tenant's rows ------------------------------------------------------------------------


async def test_pages_cover_exactly_the_tenants_jobs_newest_first(app: App) -> None:
    by_tenant, none = await seed(app)
    seen: set[str] = set()
    for tenant, expected in by_tenant.items():
        pages = await pages_of(app, tenant, page_size=3)
        check_links(pages, tenant, None, 3)
        got = ids_of(pages)
        assert got == sorted(expected, reverse=True), tenant  # exactly its jobs, each once, newest first
        assert not set(got) & set(none)
        seen |= set(got)
    # Every tenanted job is in exactly its own tenant's export; no untenanted one in any.
    assert seen == {i for ids in by_tenant.values() for i in ids}
    assert not seen & set(none)


async def test_a_tenant_nobody_has_and_near_misses_export_one_empty_page(app: App) -> None:
    await seed(app, per_tenant=2)
    for tenant in ("acme-", "Acme", "a", "cme", "%", "_", "acme  ", "none", "null"):
        pages = await pages_of(app, tenant)
        assert len(pages) == 1, tenant
        assert pages[0].jobs == [] and pages[0].next is None and pages[0].number == 1


async def test_next_is_a_cursor_admin_list_follows(app: App) -> None:
    await seed(app, per_tenant=7)
    pages = await pages_of(app, "acme", page_size=3)
    assert [len(p.jobs) for p in pages] == [3, 3, 1]
    for page, following in itertools.pairwise(pages):
        listed = await app.admin.list(tenant="acme", after=page.next, limit=3)
        assert [j.id for j in listed.jobs] == [j.id for j in following.jobs]


async def test_a_page_document_is_the_tenant_state_number_jobs_without_steps_and_next(app: App) -> None:
    await seed(app, per_tenant=3)
    first, second = await pages_of(app, "acme-2", page_size=2)
    document = first.to_dict()
    assert set(document) == {"tenant", "state", "page", "jobs", "next"}
    assert (document["tenant"], document["state"], document["page"]) == ("acme-2", None, 1)
    assert document["next"] == first.jobs[-1].id
    assert [j["id"] for j in document["jobs"]] == [j.id for j in first.jobs]
    assert all("steps" not in j and j["tenant"] == "acme-2" for j in document["jobs"])
    assert document["jobs"][0]["payload"]["t"] == "acme-2"
    assert second.to_dict()["next"] is None and second.to_dict()["page"] == 2
    assert first.filename == "page-000001.json" and second.filename == "page-000002.json"


# -- the state filter ------------------------------------------------------------------------------


async def test_state_filter_narrows_within_the_tenant(app: App) -> None:
    work, untenanted = declare(app)
    ready = [r.id for r in await work.enqueue_many([{"t": "acme", "i": i} for i in range(3)])]
    delayed = [r.id for r in await work.enqueue_many([{"t": "acme", "i": i} for i in range(4)], delay="1h")]
    cancelled = [(await app.admin.cancel(i)).id for i in ready[:1]]
    ready = ready[1:]
    # The same states in other tenants and with none, which must never show.
    await work.enqueue_many([{"t": t} for t in ("acme-2", "ACME", "acm")], delay="1h")
    await untenanted.enqueue({}, delay="1h")
    for other in await work.enqueue_many([{"t": t} for t in ("acme-2", "ACME")]):
        await app.admin.cancel(other.id)

    for state, expected in (("ready", ready), ("delayed", delayed), ("cancelled", cancelled)):
        pages = await pages_of(app, "acme", state=state, page_size=2)
        check_links(pages, "acme", state, 2)
        assert ids_of(pages) == sorted(expected, reverse=True), state
        assert all(job.state == state for page in pages for job in page.jobs)
        assert pages[0].to_dict()["state"] == state
    for state in ("done", "dead", "running"):
        (only,) = await pages_of(app, "acme", state=state)
        assert only.jobs == [] and only.next is None


# -- page sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "size", "lengths"),
    [
        (6, 3, [3, 3]),  # an exact multiple: no empty page after the last full one
        (7, 3, [3, 3, 1]),  # one over
        (5, 3, [3, 2]),  # one under
        (3, 3, [3]),
        (2, 3, [2]),
        (4, 1, [1, 1, 1, 1]),
        (0, 3, [0]),  # always a first page
    ],
)
async def test_page_size_boundaries(app: App, jobs: int, size: int, lengths: list[int]) -> None:
    work, untenanted = declare(app)
    refs = await work.enqueue_many([{"t": "acme", "i": i} for i in range(jobs)]) if jobs else []
    await work.enqueue_many([{"t": "acme-2"}, {"t": "ACME"}])
    await untenanted.enqueue({})
    pages = await pages_of(app, "acme", page_size=size)
    assert [len(p.jobs) for p in pages] == lengths
    check_links(pages, "acme", None, size)
    assert ids_of(pages) == sorted((r.id for r in refs), reverse=True)


@pytest.mark.parametrize(("jobs", "lengths"), [(200, [200]), (201, [200, 1])])
async def test_the_largest_page_size(app: App, jobs: int, lengths: list[int]) -> None:
    work, _ = declare(app)
    refs = await work.enqueue_many([{"t": "acme", "i": i} for i in range(jobs)])
    await work.enqueue_many([{"t": "acme-2", "i": i} for i in range(5)])
    pages = await pages_of(app, "acme", page_size=200)
    assert [len(p.jobs) for p in pages] == lengths
    check_links(pages, "acme", None, 200)
    assert ids_of(pages) == sorted((r.id for r in refs), reverse=True)


async def test_the_default_page_size_is_100(app: App) -> None:
    work, _ = declare(app)
    await work.enqueue_many([{"t": "acme", "i": i} for i in range(101)])
    assert [len(p.jobs) for p in await pages_of(app, "acme")] == [100, 1]


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["", "x" * 201, None, 7, b"acme", "ac\x00me"])
async def test_a_tenant_that_is_no_tenant_id_is_refused_at_the_call(app: App, tenant: Any) -> None:
    await seed(app, per_tenant=1)
    with pytest.raises(ConfigurationError) as refused:
        app.admin.export(tenant=tenant)  # refused at the call, before any iteration
    error = refused.value
    assert error.code == "CONFIG_INVALID"
    assert "tenant" in error.cause and "at most 200 characters" in error.cause
    shown = repr(tenant) if not isinstance(tenant, str) or len(tenant) <= 60 else repr(tenant[:60])
    assert shown in error.cause
    assert "--tenant acme" in error.fix


async def test_a_tenant_of_200_characters_is_taken(app: App) -> None:
    work, _ = declare(app)
    tenant = "t" * 200
    ref = await work.enqueue({"t": tenant})
    await work.enqueue({"t": tenant[:199]})
    (page,) = await pages_of(app, tenant)
    assert [j.id for j in page.jobs] == [ref.id]


@pytest.mark.parametrize("state", ["bogus", "READY", "", 3])
async def test_an_unknown_state_is_refused_at_the_call(app: App, state: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app.admin.export(tenant="acme", state=state)
    assert refused.value.code == "STATE_UNKNOWN"
    assert repr(state) in refused.value.cause and "ready" in refused.value.cause
    assert "workhorse export --tenant acme --state dead" in refused.value.fix


@pytest.mark.parametrize("size", [0, -1, 201, True, 2.0, "10"])
async def test_a_page_size_outside_1_to_200_is_refused_at_the_call(app: App, size: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        app.admin.export(tenant="acme", page_size=size)
    assert refused.value.code == "PAGE_LIMIT_INVALID"
    assert repr(size) in refused.value.cause


# -- the belt and the braces -----------------------------------------------------------------------


class _Leaky:
    """A driver that forgets the tenant filter: every row comes back."""

    def __init__(self, app: App) -> None:
        self.real = app.driver

    async def list_jobs(self, filters: ListFilter, *, limit: int, after: str | None = None) -> Page:
        return await self.real.list_jobs(ListFilter(state=filters.state), limit=limit, after=after)


class _Source:
    def __init__(self, driver: Any) -> None:
        self.driver = driver


async def test_a_driver_answering_another_tenants_row_stops_the_export(memory_app: App) -> None:
    work, _ = declare(memory_app)
    await work.enqueue({"t": "acme"})
    await work.enqueue({"t": "acme-2"})  # the newest: on the first page
    pages = export_pages(_Source(_Leaky(memory_app)), tenant="acme", state=None, page_size=10)
    with pytest.raises(WorkhorseError) as stopped:
        await anext(pages)
    assert stopped.value.code == "EXPORT_TENANT_MISMATCH"
