"""Hostile input to the dashboard (issue 27, defect 6): the token's redirect stays on the
dashboard; a NUL in a form or filter is refused with 400 and the code the same bad name gets from
the API (never 503 DATABASE_ERROR); text that is not UTF-8 is refused, never decoded with
replacement characters and acted on."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from dashkit import HOST, ORIGIN, client, csrf_of, declare, refusal_code

from workhorse import App
from workhorse.dashboard import make_asgi_app

TOKEN = "s3cret-token-123"


@pytest.fixture
async def seeded(pg_app: App) -> App:
    state = declare(pg_app)
    await state["work"].enqueue({"message": "hello", "org": "acme"})
    return pg_app


async def _location(asgi: Any, path: str, query: str) -> tuple[int, str]:
    """One GET straight to the ASGI app, its path as a server hands it over (percent-decoded):
    an HTTP client would read ``//host`` as a host, or drop a tab, before sending it."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": quote(path).encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", HOST.encode())],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asgi(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers.get("location", "")


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("//127.0.0.2:18999/phish", "/127.0.0.2:18999/phish"),  # what landed Chromium on the other host
        ("///evil.example/x", "/evil.example/x"),
        ("/\\evil.example/x", "/evil.example/x"),  # a browser reads a backslash as a slash
        ("/\\/evil.example", "/evil.example"),
        ("/\t/evil.example", "/%09/evil.example"),  # a browser drops a raw tab: it stays escaped
        ("/jobs/a b", "/jobs/a%20b"),
    ],
)
async def test_the_token_redirect_stays_on_the_dashboard(path: str, kept: str) -> None:
    status, location = await _location(
        make_asgi_app(App(driver="memory"), token=TOKEN), path, f"token={TOKEN}&state=ready"
    )
    assert status == 303
    assert location == f"{kept}?state=ready"


async def test_the_token_redirect_keeps_an_ordinary_page() -> None:
    app = App(driver="memory")
    async with client(make_asgi_app(app, token=TOKEN)) as http:
        login = await http.get(f"/jobs?token={TOKEN}&state=ready")
        assert login.headers["location"] == "/jobs?state=ready"


async def _csrf(http: object, seeded: App) -> str:
    return csrf_of((await http.get("/")).text)  # type: ignore[attr-defined]


async def test_a_nul_in_a_queue_form_is_refused_as_the_api_refuses_it(seeded: App) -> None:
    async with client(make_asgi_app(seeded)) as http:
        csrf = await _csrf(http, seeded)
        form = {"csrf": csrf, "confirm": "yes", "queue": "emails\x00"}
        answer = await http.post("/queues/pause", data=form, headers={"origin": ORIGIN})
        assert answer.status_code == 400 and refusal_code(answer.text) == "QUEUE_NAME_INVALID"
    assert await seeded.admin.pauses() == []


@pytest.mark.parametrize(
    ("field", "code"), [("queue", "QUEUE_NAME_INVALID"), ("tenant", "TENANT_INVALID"), ("name", "JOB_NAME_INVALID")]
)
async def test_a_nul_in_a_bulk_filter_is_refused_as_the_api_refuses_it(seeded: App, field: str, code: str) -> None:
    async with client(make_asgi_app(seeded)) as http:
        csrf = await _csrf(http, seeded)
        form = {"csrf": csrf, "state": "ready", field: "a\x00b"}
        answer = await http.post("/bulk/cancel", data=form, headers={"origin": ORIGIN})
        assert answer.status_code == 400 and refusal_code(answer.text) == code
        counted = await http.get("/bulk/cancel/count", params={"state": "ready", field: "a\x00b"})
        assert counted.status_code == 400 and counted.json()["error"]["code"] == code
        listed = await http.get("/jobs", params={field: "a\x00b"})
        assert listed.status_code == 400 and refusal_code(listed.text) == code


async def test_a_form_that_is_not_utf8_is_refused(seeded: App) -> None:
    async with client(make_asgi_app(seeded)) as http:
        csrf = await _csrf(http, seeded)
        body = f"csrf={csrf}&confirm=yes&queue=%FF%FE"
        answer = await http.post(
            "/queues/pause",
            content=body.encode(),
            headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 400 and refusal_code(answer.text) == "DASHBOARD_INPUT_INVALID"
        raw = await http.post(
            "/queues/pause",
            content=f"csrf={csrf}&confirm=yes&queue=".encode() + b"\xff\xfe",
            headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"},
        )
        assert raw.status_code == 400 and refusal_code(raw.text) == "DASHBOARD_INPUT_INVALID"
    assert await seeded.admin.pauses() == []


async def test_a_query_that_is_not_utf8_is_refused(seeded: App) -> None:
    async with client(make_asgi_app(seeded)) as http:
        answer = await http.get("/jobs?queue=%FF%FE")
        assert answer.status_code == 400 and refusal_code(answer.text) == "DASHBOARD_INPUT_INVALID"
