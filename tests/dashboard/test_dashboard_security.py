"""The dashboard's security rules over HTTP (no browser): the token, the session cookie, origin and
CSRF checks, no action by GET, read-only, escaping; and the command's refusal to serve a
non-loopback address without a token."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from dashkit import HOSTILE, ORIGIN, client, csrf_of, declare, refusal_code

from workhorse import App
from workhorse.cli import cli
from workhorse.dashboard import make_asgi_app
from workhorse.dashboard.security import COOKIE, check_bind, is_loopback
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
