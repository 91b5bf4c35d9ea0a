"""The dashboard's security rules over HTTP (no browser): the token, the session cookie, origin and
CSRF checks, the loopback Host rule without a token (DNS rebinding), the form size limit, no
action by GET, read-only, escaping; and the command's refusal to serve a non-loopback address
without a token."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from click.testing import CliRunner
from dashkit import HOSTILE, ORIGIN, client, csrf_of, declare, refusal_code

from workhorse import App
from workhorse.cli import cli
from workhorse.dashboard import make_asgi_app
from workhorse.dashboard.security import COOKIE, check_bind, host_name, is_loopback
from workhorse.errors import ConfigurationError

TOKEN = "s3cret-token-123"


@pytest.fixture
async def seeded(pg_app: App) -> App:
    state = declare(pg_app)
    await state["work"].enqueue({"message": "hello", "org": "acme"})
    return pg_app


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.com")
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(ConfigurationError) as refused:
        check_bind("0.0.0.0", None)
    assert refused.value.code == "DASHBOARD_TOKEN_REQUIRED"
    assert host_name("[::1]:8000") == "::1" and host_name("localhost") == "localhost"
    assert host_name("127.0.0.1:8000") == "127.0.0.1" and host_name("evil.example:80") == "evil.example"
    assert host_name("") is None and host_name("[::1") is None and host_name("a:1:2") is None


@pytest.mark.parametrize("bind", ["0.0.0.0:8000", "[::]:8000", "192.168.1.10:9000"])
def test_the_command_refuses_a_public_address_without_a_token(bind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKHORSE_DASHBOARD_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["dashboard", "--bind", bind, "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["code"] == "DASHBOARD_TOKEN_REQUIRED"


def test_the_command_refuses_a_bad_address_and_a_short_token() -> None:
    result = CliRunner().invoke(cli, ["dashboard", "--bind", "nowhere", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "DASHBOARD_ADDRESS_INVALID"
    result = CliRunner().invoke(cli, ["dashboard", "--token", "short", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "DASHBOARD_TOKEN_INVALID"


async def test_a_token_is_asked_for_on_loopback_too(seeded: App) -> None:
    async with client(make_asgi_app(seeded, token=TOKEN)) as http:
        answer = await http.get("/")
        assert answer.status_code == 401 and refusal_code(answer.text) == "DASHBOARD_UNAUTHORIZED"
        assert answer.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.get("/jobs", headers={"authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401 and "does not match" in wrong.text
        assert (await http.get("/?token=wrong-token-x")).status_code == 401
        assert (await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})).status_code == 200
        # Static files hold nothing of the queue: the refusal page is styled.
        assert (await http.get("/static/dashboard.css")).status_code == 200


async def test_the_query_token_sets_a_session_cookie_and_leaves_the_address(seeded: App) -> None:
    async with client(make_asgi_app(seeded, token=TOKEN)) as http:
        login = await http.get(f"/jobs?state=ready&token={TOKEN}")
        assert login.status_code == 303
        assert login.headers["location"] == "/jobs?state=ready"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert TOKEN not in cookie  # the cookie is derived from the token, not the token
        jobs = await http.get("/jobs?state=ready")  # the client keeps the cookie
        assert jobs.status_code == 200 and "hello" not in jobs.text  # (the payload is on the job page)
        assert "emails" in jobs.text
    async with client(make_asgi_app(seeded, token=TOKEN), cookie=f"{COOKIE}=forged") as http:
        assert (await http.get("/")).status_code == 401


async def test_actions_are_posts_with_origin_and_csrf(seeded: App) -> None:
    page = await seeded.admin.list()
    job_id = page.jobs[0].id
    async with client(make_asgi_app(seeded)) as http:
        csrf = csrf_of((await http.get(f"/jobs/{job_id}")).text)
        for path in (f"/jobs/{job_id}/cancel", f"/jobs/{job_id}/remove", "/queues/pause", "/bulk/requeue"):
            got = await http.get(path, params={"csrf": csrf, "confirm": "yes", "queue": "emails", "state": "dead"})
            assert got.status_code == 405, path
            assert refusal_code(got.text) == "DASHBOARD_METHOD_NOT_ALLOWED"
        form = {"csrf": csrf, "confirm": "yes"}
        no_origin = await http.post(f"/jobs/{job_id}/cancel", data=form)
        assert no_origin.status_code == 403 and refusal_code(no_origin.text) == "DASHBOARD_ORIGIN_REFUSED"
        elsewhere = await http.post(f"/jobs/{job_id}/cancel", data=form, headers={"origin": "https://evil.example"})
        assert elsewhere.status_code == 403 and refusal_code(elsewhere.text) == "DASHBOARD_ORIGIN_REFUSED"
        null = await http.post(f"/jobs/{job_id}/cancel", data=form, headers={"origin": "null"})
        assert null.status_code == 403
        bad = await http.post(f"/jobs/{job_id}/cancel", data={**form, "csrf": "0" * 64}, headers={"origin": ORIGIN})
        assert bad.status_code == 403 and refusal_code(bad.text) == "DASHBOARD_CSRF_INVALID"
        missing = await http.post(f"/jobs/{job_id}/cancel", data={"confirm": "yes"}, headers={"origin": ORIGIN})
        assert refusal_code(missing.text) == "DASHBOARD_CSRF_INVALID"
        assert (await seeded.admin.get(job_id)).state == "ready"  # type: ignore[union-attr]
        # Unconfirmed: a page asking to confirm, and nothing done.
        ask = await http.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf}, headers={"origin": ORIGIN})
        assert ask.status_code == 200 and 'name="confirm" value="yes"' in ask.text
        assert (await seeded.admin.get(job_id)).state == "ready"  # type: ignore[union-attr]
        # A Referer from this host stands in for a missing Origin.
        done = await http.post(f"/jobs/{job_id}/cancel", data=form, headers={"referer": f"{ORIGIN}/jobs/{job_id}"})
        assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job_id}?notice=cancelled"
        assert (await seeded.admin.get(job_id)).state == "cancelled"  # type: ignore[union-attr]
        # The same refusal the CLI prints: code, cause, fix.
        again = await http.post(f"/jobs/{job_id}/cancel", data=form, headers={"origin": ORIGIN})
        assert again.status_code == 409 and refusal_code(again.text) == "JOB_NOT_CANCELLABLE"
        assert "refusal-fix" in again.text


async def test_read_only_hides_and_refuses_actions(seeded: App) -> None:
    job_id = (await seeded.admin.list()).jobs[0].id
    async with client(make_asgi_app(seeded, read_only=True)) as http:
        page = await http.get(f"/jobs/{job_id}")
        assert page.status_code == 200 and "<button" not in page.text and "read-only" in page.text
        overview = await http.get("/")
        assert ">Pause<" not in overview.text
        csrf = csrf_of('name="csrf" value="' + "a" * 64 + '"')
        tried = await http.post(
            f"/jobs/{job_id}/cancel", data={"csrf": csrf, "confirm": "yes"}, headers={"origin": ORIGIN}
        )
        assert tried.status_code == 403 and refusal_code(tried.text) == "DASHBOARD_READ_ONLY"
        paused = await http.post(
            "/queues/pause", data={"queue": "emails", "confirm": "yes"}, headers={"origin": ORIGIN}
        )
        assert paused.status_code == 403
    assert (await seeded.admin.get(job_id)).state == "ready"  # type: ignore[union-attr]
    assert await seeded.admin.pauses() == []


async def test_database_values_are_escaped_and_the_policy_forbids_inline_script(pg_app: App) -> None:
    state = declare(pg_app)
    job = await state["work"].enqueue({"message": HOSTILE, "org": HOSTILE, "fail": True}, key=HOSTILE)
    async with client(make_asgi_app(pg_app)) as http:
        for path in (f"/jobs/{job.id}", "/jobs", f"/jobs?tenant={HOSTILE}", "/"):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert "<script>window" not in page.text and '<b id="pwn">' not in page.text, path
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert page.headers["x-frame-options"] == "DENY"
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in (await http.get(f"/jobs/{job.id}")).text
        refused = await http.get("/jobs", params={"state": HOSTILE})
        assert refused.status_code == 400 and refusal_code(refused.text) == "STATE_UNKNOWN"
        assert "<script>window" not in refused.text
        missing = await http.get(f"/jobs/{HOSTILE}")
        assert missing.status_code == 404 and "<script>window" not in missing.text


async def test_mounted_under_a_path_the_links_follow(seeded: App) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    outer = Starlette(routes=[Mount("/ops/workhorse", app=make_asgi_app(seeded, token=TOKEN))])
    async with client(outer) as http:
        login = await http.get(f"/ops/workhorse/?token={TOKEN}")
        assert login.status_code == 303 and login.headers["location"] == "/ops/workhorse/"
        assert "Path=/ops/workhorse" in login.headers["set-cookie"]
        page = await http.get("/ops/workhorse/")
        assert page.status_code == 200
        assert 'href="/ops/workhorse/jobs"' in page.text and 'href="/ops/workhorse/static/dashboard.css"' in page.text


async def test_an_action_goes_back_only_to_a_page_of_the_dashboard(seeded: App) -> None:
    async with client(make_asgi_app(seeded)) as http:
        csrf = csrf_of((await http.get("/")).text)
        form = {"csrf": csrf, "confirm": "yes", "queue": "emails"}
        for target, landed in (
            ("https://evil.example/", "/?notice=paused"),
            ("//evil.example/x", "/?notice=paused"),
            ("/jobs?queue=emails", "/jobs?queue=emails&notice=paused"),
        ):
            done = await http.post("/queues/pause", data={**form, "next": target}, headers={"origin": ORIGIN})
            assert done.status_code == 303 and done.headers["location"] == landed, target
        assert [p.queue for p in await seeded.admin.pauses()] == ["emails"]
        refused = await http.post("/queues/pause", data={**form, "queue": " "}, headers={"origin": ORIGIN})
        assert refused.status_code == 400 and refusal_code(refused.text) == "QUEUE_NAME_INVALID"
        resumed = await http.post("/queues/resume", data=form, headers={"origin": ORIGIN})
        assert resumed.headers["location"] == "/?notice=resumed" and await seeded.admin.pauses() == []


EVIL = "evil.example:8000"  # re-pointed at 127.0.0.1 by its owner: the browser still sends its name


@pytest.mark.parametrize(
    "host",
    [
        EVIL,
        "evil.example",
        "127.0.0.1.evil.example:8000",
        "localhost.evil.example",
        "10.0.0.5:8000",
        "[::2]:8000",
        "",
        "[::1",
        "127.0.0.1:8000:9",
    ],
)
async def test_without_a_token_a_request_for_another_host_is_refused(seeded: App, host: str) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 is same-origin
    with its own name, so nothing it sends can be told apart by Origin; only its Host can."""
    job_id = (await seeded.admin.list()).jobs[0].id
    async with client(make_asgi_app(seeded)) as http:
        csrf = csrf_of((await http.get(f"/jobs/{job_id}")).text)  # (the attacker cannot even read this)
        for path in ("/", "/jobs", f"/jobs/{job_id}", "/overview/live", "/workers", "/tasks"):
            page = await http.get(path, headers={"host": host})
            assert page.status_code == 403, path
            assert refusal_code(page.text) == "DASHBOARD_HOST_REFUSED", path
            assert "hello" not in page.text and job_id not in page.text and csrf not in page.text, path
            assert "www-authenticate" not in page.headers and page.headers["x-frame-options"] == "DENY"
        page = await http.get(f"/jobs/{job_id}", headers={"host": host})
        assert "http://127.0.0.1:8000/" in page.text and "token" in page.text  # the fix: where to browse
        form = {"csrf": csrf, "confirm": "yes", "state": "ready"}
        posted = await http.post("/bulk/cancel", data=form, headers={"host": host, "origin": f"http://{host}"})
        assert posted.status_code == 403 and refusal_code(posted.text) == "DASHBOARD_HOST_REFUSED"
        posted = await http.post(
            f"/jobs/{job_id}/cancel", data=form, headers={"host": host, "origin": f"http://{host}"}
        )
        assert posted.status_code == 403 and refusal_code(posted.text) == "DASHBOARD_HOST_REFUSED"
        # The stylesheet holds nothing of the queue: the refusal page keeps its style.
        assert (await http.get("/static/dashboard.css", headers={"host": host})).status_code == 200
    assert (await seeded.admin.get(job_id)).state == "ready"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8000", "127.0.0.1", "127.9.8.7:8000", "localhost:8000", "LocalHost", "[::1]:8000", "[::1]"]
)
async def test_without_a_token_loopback_host_names_are_served(seeded: App, host: str) -> None:
    job_id = (await seeded.admin.list()).jobs[0].id
    async with client(make_asgi_app(seeded)) as http:
        page = await http.get(f"/jobs/{job_id}", headers={"host": host})
        assert page.status_code == 200 and "hello" in page.text
        form = {"csrf": csrf_of(page.text), "confirm": "yes"}
        done = await http.post(f"/jobs/{job_id}/cancel", data=form, headers={"host": host, "origin": f"http://{host}"})
        assert done.status_code == 303, done.text
    assert (await seeded.admin.get(job_id)).state == "cancelled"  # type: ignore[union-attr]


async def test_mounted_without_a_token_the_same_rule_holds(seeded: App) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    web = Starlette(routes=[Mount("/ops/workhorse", app=make_asgi_app(seeded))])
    async with client(web) as http:
        refused = await http.get("/ops/workhorse/jobs", headers={"host": "ops.example.com"})
        assert refused.status_code == 403 and refusal_code(refused.text) == "DASHBOARD_HOST_REFUSED"
        assert "http://127.0.0.1:8000/ops/workhorse/" in refused.text
        assert (await http.get("/ops/workhorse/jobs")).status_code == 200


async def test_a_token_lifts_the_host_rule(seeded: App) -> None:
    job_id = (await seeded.admin.list()).jobs[0].id
    bearer = {"authorization": f"Bearer {TOKEN}", "host": "dash.example.com"}
    async with client(make_asgi_app(seeded, token=TOKEN)) as http:
        # Another name, no token: asked for the token (a re-pointed page has neither it nor the cookie).
        asked = await http.get("/jobs", headers={"host": "dash.example.com"})
        assert asked.status_code == 401 and refusal_code(asked.text) == "DASHBOARD_UNAUTHORIZED"
        page = await http.get(f"/jobs/{job_id}", headers=bearer)
        assert page.status_code == 200 and "hello" in page.text
        done = await http.post(
            f"/jobs/{job_id}/cancel",
            data={"csrf": csrf_of(page.text), "confirm": "yes"},
            headers={**bearer, "origin": "http://dash.example.com"},
        )
        assert done.status_code == 303, done.text
    assert (await seeded.admin.get(job_id)).state == "cancelled"  # type: ignore[union-attr]


@pytest.mark.parametrize("declared", [True, False])
async def test_an_oversized_form_is_refused_without_being_read_whole(seeded: App, declared: bool) -> None:
    """With a Content-Length above the limit nothing is read; without one (chunked), reading stops
    just past it."""
    from workhorse.dashboard.actions import MAX_FORM

    job_id = (await seeded.admin.list()).jobs[0].id
    pulled = 0
    chunk = b"x" * 1024
    chunks = 1024  # a megabyte

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(chunks):
            pulled += 1
            yield chunk

    form = {"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"}
    headers = {**form, "content-length": str(len(chunk) * chunks)} if declared else form
    async with client(make_asgi_app(seeded)) as http:
        answer = await http.post(f"/jobs/{job_id}/cancel", content=body(), headers=headers)
        assert answer.status_code == 413 and refusal_code(answer.text) == "DASHBOARD_FORM_TOO_LARGE"
        assert pulled == (0 if declared else MAX_FORM // len(chunk) + 1), pulled
        # A form at the limit is read (and refused only for its missing CSRF token).
        small = await http.post(f"/jobs/{job_id}/cancel", content=b"a=" + b"x" * (MAX_FORM - 2), headers=form)
        assert small.status_code == 403 and refusal_code(small.text) == "DASHBOARD_CSRF_INVALID"
    assert (await seeded.admin.get(job_id)).state == "ready"  # type: ignore[union-attr]
