"""One POST on the wire (httpx, imported here only), and what its answer means.

Design: docs/guides/webhooks.md
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from workhorse.logs import CONTROLS
from workhorse.webhooks.guard import IPAddress, Target

EXCERPT_BYTES = 1024  # of a response body, kept in the ledger
USER_AGENT = "workhorse-webhooks/1"
_ssl: ssl.SSLContext | None = None


@dataclass(frozen=True)
class Answer:
    """What one attempt got: ``status`` as the ledger records it, and a ``Retry-After`` in seconds
    when the receiver stated one (429 or 503)."""

    status: str  # delivered, failed, throttled, gone
    response_code: int | None
    latency_ms: float
    excerpt: str | None
    error: str | None
    retry_after: float | None = None


def _context() -> ssl.SSLContext:
    global _ssl  # noqa: PLW0603 - one verifying context per process: loading the CA bundle costs ~10 ms
    if _ssl is None:
        import certifi

        _ssl = ssl.create_default_context(cafile=certifi.where())
    return _ssl


async def post(
    target: Target, addresses: list[IPAddress], headers: dict[str, str], body: bytes, seconds: float
) -> Answer:
    """POST to the first of ``addresses`` that accepts a connection: the next is tried only when
    connecting failed, so nothing was sent to the one before. ``seconds`` bounds the whole attempt."""
    import httpx

    started = time.monotonic()
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    request_headers = {
        "host": target.host_header,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "accept-encoding": "identity",  # the excerpt is read raw: nothing is inflated
        **headers,
    }
    try:
        async with asyncio.timeout(seconds):
            async with httpx.AsyncClient(
                verify=_context(), trust_env=False, follow_redirects=False, timeout=seconds
            ) as client:
                for n, address in enumerate(addresses, 1):
                    request = client.build_request(
                        "POST", target.url_for(address), headers=request_headers, content=body, extensions=extensions
                    )
                    try:
                        response = await client.send(request, stream=True)
                        break
                    except httpx.ConnectError:
                        if n == len(addresses):
                            raise
                try:
                    excerpt = await _excerpt(response)
                finally:
                    await response.aclose()
                answer = judge(response.status_code, response.headers, excerpt, _ms(started))
    except TimeoutError:
        return Answer("failed", None, _ms(started), None, f"no complete answer within the timeout of {seconds:g}s")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as error:  # ValueError: UnicodeEncodeError, a parse
        return Answer("failed", None, _ms(started), None, f"{type(error).__name__}: {error}"[:500])
    return answer


def judge(code: int, headers: object, excerpt: str, latency_ms: float) -> Answer:
    """The ledger's status for a response: 2xx delivered, 410 gone, 429/503 throttled (with the
    Retry-After it states), anything else (3xx included: never followed) failed."""
    get = getattr(headers, "get", None)

    def header(name: str) -> str | None:
        value = get(name) if get is not None else None
        return None if value is None else str(value)

    if 200 <= code < 300:
        return Answer("delivered", code, latency_ms, excerpt, None)
    if code == 410:
        return Answer("gone", code, latency_ms, excerpt, "the receiver answered 410 Gone: the endpoint is disabled")
    if code in (429, 503):
        stated = retry_after_seconds(header("retry-after"), header("date"))
        note = f"; Retry-After {stated:g}s" if stated is not None else ""
        return Answer("throttled", code, latency_ms, excerpt, f"the receiver answered {code}{note}", stated)
    if 300 <= code < 400:
        where = header("location")
        return Answer("failed", code, latency_ms, excerpt, f"redirect to {where!r} not followed (a 3xx is a failure)")
    return Answer("failed", code, latency_ms, excerpt, f"the receiver answered {code}")


def retry_after_seconds(value: str | None, date: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` as seconds from now: delta-seconds, or an HTTP-date measured against the
    response's own ``Date`` (else our clock). ``0``, a past date or nonsense: None (unstated)."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # "²".isdigit() too, and int() refuses it
        seconds = float(int(text[:12]))
        return seconds if seconds > 0 else None
    when = _http_date(text)
    if when is None:
        return None
    base = _http_date(date) if date is not None else None
    if base is None:
        base = now or datetime.now(UTC)  # clock-ok: only when the response carries no Date
    seconds = (when - base).total_seconds()
    return seconds if seconds > 0 else None


def _http_date(text: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def spread(seconds: float, max_delay: float, rng: random.Random | None = None) -> float:
    """A stated delay clamped by ``max_delay``, then spread over up to 10% more (never sooner than
    stated), so deliveries throttled at one instant do not all come back at the same one."""
    clamped = min(seconds, max_delay)
    extra = (rng or random).uniform(0, clamped * 0.1)
    return min(clamped + extra, max(max_delay, clamped))


async def _excerpt(response: object) -> str:
    import httpx

    assert isinstance(response, httpx.Response)
    kept = b""
    async for chunk in response.aiter_raw():  # as sent: a compressed answer is never inflated
        kept += chunk
        if len(kept) >= EXCERPT_BYTES:
            break
    text = kept[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    return CONTROLS.sub("\ufffd", text)  # no terminal escape reaches `workhorse webhooks deliveries`


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
