"""Fuzz the dashboard's forms and filters (issue 27): any text or bytes (not UTF-8, NUL, lone
surrogates as CESU-8, controls) in any field of any page's query or any action's form is answered
with a page, a redirect of this dashboard, or a refusal with a code (400, 404, 409): never a 500,
never a 503 (a value the database refused reads as an outage to monitoring)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import httpx
from fuzzkit import FUZZ, Loop, declare_echo, storable_text, text
from hypothesis import event, given, settings
from hypothesis import strategies as st

from workhorse import App
from workhorse.dashboard import make_asgi_app

sys.path.insert(0, str(Path(__file__).parents[1] / "dashboard"))
from dashkit import ORIGIN, csrf_of, refusal_code

QUERY_FIELDS = [
    "state", "queue", "name", "tenant", "id_prefix", "created-from", "created_to", "payload", "error",
    "limit", "after", "before", "notice", "verb", "affected", "remaining", "page",
]  # fmt: skip
FORM_FIELDS = ["queue", "tenant", "name", "state", "next", "reason", "from_step", "confirm"]
GETS = ["/", "/jobs", "/workers", "/tasks", "/overview/live", "/bulk/cancel/count", "/bulk/requeue/count"]
POSTS = ["/queues/pause", "/queues/resume", "/bulk/cancel", "/bulk/requeue", "/bulk/promote", "/jobs/{id}/requeue"]
ANSWERED = {200, 303, 400, 404, 409}

values = st.one_of(
    storable_text.map(str.encode),  # UTF-8, NUL-free: what reaches the checks past the decoding
    storable_text.map(lambda t: t[:3].encode() + b"\x00" + t[3:].encode()),
    text.map(lambda t: t.encode("utf-8", "surrogatepass")),  # a lone surrogate arrives as CESU-8: not UTF-8
    st.binary(max_size=10),
    st.sampled_from([b"ready", b"dead", b"emails", b"yes", b"\x00", b"%", b"/jobs", b"//evil.example"]),
)


def _encoded(fields: dict[str, bytes]) -> bytes:
    return "&".join(f"{quote_from_bytes(k.encode())}={quote_from_bytes(v)}" for k, v in fields.items()).encode()


def _checked(answer: httpx.Response) -> None:
    assert answer.status_code in ANSWERED, (answer.status_code, answer.text[:2000])
    if answer.status_code == 303:
        location = answer.headers["location"]
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    if answer.status_code == 400:
        code = (
            answer.json()["error"]["code"]
            if answer.headers["content-type"].startswith("application/json")
            else (refusal_code(answer.text))
        )
        assert code and re.fullmatch(r"[A-Z_]+", code) and not code.startswith("DATABASE"), code
        event(f"400 {code}")
    else:
        event(str(answer.status_code))


@settings(FUZZ, max_examples=40)
@given(
    path=st.sampled_from([*GETS, "/jobs/{id}"]),
    query=st.dictionaries(st.sampled_from(QUERY_FIELDS), values, max_size=4),
)
def test_any_query_is_answered_or_refused_with_a_code(
    fuzz_app: App, loop: Loop, path: str, query: dict[str, bytes]
) -> None:
    async def get() -> httpx.Response:
        job_id = (await declare_echo(fuzz_app).enqueue({"t": "acme"}, key="fuzz-dashboard")).id
        transport = httpx.ASGITransport(app=make_asgi_app(fuzz_app))
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
            raw = path.replace("{id}", job_id).encode() + b"?" + _encoded(query)
            return await http.get(httpx.URL(ORIGIN).copy_with(raw_path=raw))

    _checked(loop.run(get()))


@settings(FUZZ, max_examples=40)
@given(
    path=st.sampled_from(POSTS),
    form=st.dictionaries(st.sampled_from(FORM_FIELDS), values, max_size=5),
    confirm=st.booleans(),
)
def test_any_form_is_answered_or_refused_with_a_code(
    fuzz_app: App, loop: Loop, path: str, form: dict[str, bytes], confirm: bool
) -> None:
    async def post() -> httpx.Response:
        job_id = (await declare_echo(fuzz_app).enqueue({"t": "acme"}, key="fuzz-dashboard")).id
        transport = httpx.ASGITransport(app=make_asgi_app(fuzz_app))
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
            fields: dict[str, Any] = {**form, "csrf": csrf_of((await http.get("/")).text).encode()}
            if confirm:
                fields["confirm"] = b"yes"
            answer = await http.post(
                path.replace("{id}", job_id),
                content=_encoded(fields),
                headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"},
            )
        for paused in await fuzz_app.admin.pauses():
            await fuzz_app.admin.resume(paused.queue)
        return answer

    _checked(loop.run(post()))
