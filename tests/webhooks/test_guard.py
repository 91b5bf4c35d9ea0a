"""The SSRF guard: URLs refused at add time, addresses refused at delivery, names resolved once."""

from __future__ import annotations

import ipaddress

import pytest

from workhorse.webhooks import WebhookError, WebhookPolicy
from workhorse.webhooks.guard import check_url, refusal, resolve
from workhorse.webhooks.wire import judge, retry_after_seconds, spread

STRICT = WebhookPolicy()
OPEN = WebhookPolicy(allow_private=True, allow_http=True)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "224.0.0.1",
        "100.64.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::", "64:ff9b::7f00:1",
        "fec0::1", "feff:ffff::1",  # fec0::/10, the deprecated IPv6 site-local range
    ],
)  # fmt: skip
def test_non_public_addresses_are_refused(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def code(url: object, policy: WebhookPolicy = STRICT) -> str:
    with pytest.raises(WebhookError) as caught:
        check_url(url, policy)
    return caught.value.code


def test_urls_refused_when_added() -> None:
    assert code("http://example.com/hooks") == "WEBHOOK_URL_REFUSED"
    assert code("https://127.0.0.1/hooks") == "WEBHOOK_ADDRESS_REFUSED"
    assert code("https://[::ffff:169.254.169.254]/latest") == "WEBHOOK_ADDRESS_REFUSED"
    assert code("ftp://example.com/") == "WEBHOOK_URL_INVALID"
    assert code("https://user:pw@example.com/") == "WEBHOOK_URL_INVALID"
    assert code("https:///nohost") == "WEBHOOK_URL_INVALID"
    assert code(42) == "WEBHOOK_URL_INVALID"
    assert code("https://example.com:99999/") == "WEBHOOK_URL_INVALID"
    target = check_url("https://example.com/hooks?x=1", STRICT)
    assert (target.host, target.port, target.path, target.host_header) == (
        "example.com",
        443,
        "/hooks?x=1",
        "example.com",
    )
    assert check_url("http://127.0.0.1:8080/h", OPEN).host_header == "127.0.0.1:8080"


def test_a_non_ascii_host_is_sent_idna_encoded_and_an_unencodable_one_refused() -> None:
    target = check_url("https://bücher.de/hook", STRICT)
    assert (target.host, target.host_header) == ("xn--bcher-kva.de", "xn--bcher-kva.de")  # Host, SNI, resolver
    assert check_url("https://[::1]:8443/x", OPEN).host == "::1"  # a literal stays itself
    assert code("https://exa\ufffdmple.com/hook") == "WEBHOOK_URL_INVALID"  # IDNA refuses the character
    assert code("https://a\u200eb.com/hook") == "WEBHOOK_URL_INVALID"


@pytest.mark.parametrize(
    "url",
    ["https://example.com/a\x01b", "https://example.com/h?q=\x7f", "https://exa\x01mple.com/", "https://a\x00b.com/"],
)
def test_a_url_httpx_would_not_send_is_refused_when_added(url: str) -> None:
    assert code(url) == "WEBHOOK_URL_INVALID"


async def test_resolution_is_bounded_by_the_policy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import time

    async def hangs(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(10)
        raise AssertionError("unreachable")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", hangs)
    policy = WebhookPolicy(timeout="0.2s")
    started = time.monotonic()
    with pytest.raises(WebhookError) as caught:
        await resolve(check_url("https://example.com/hooks", policy), policy)
    assert caught.value.code == "WEBHOOK_DNS_FAILED" and "0.2s" in caught.value.cause
    assert time.monotonic() - started < 5


async def test_a_name_resolving_to_loopback_is_refused_and_allowed_only_explicitly() -> None:
    target = check_url("https://localhost:8443/hooks", STRICT)  # a name: checked when resolved
    with pytest.raises(WebhookError) as caught:
        await resolve(target, STRICT)
    assert caught.value.code == "WEBHOOK_ADDRESS_REFUSED"
    assert "localhost" in caught.value.cause
    addresses = await resolve(target, OPEN)
    assert addresses and all(a.is_loopback for a in addresses)
    assert target.url_for(addresses[0]).startswith(("https://127.0.0.1:8443/", "https://[::1]:8443/"))


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1"])
async def test_numeric_forms_of_loopback_are_refused_once_resolved(host: str) -> None:
    target = check_url(f"https://{host}/hooks", STRICT)  # not a literal to ipaddress: a name, resolved
    with pytest.raises(WebhookError) as caught:
        await resolve(target, STRICT)
    assert caught.value.code == "WEBHOOK_ADDRESS_REFUSED"  # the resolver reads them as 127.0.0.1


async def test_an_unresolvable_name_is_its_own_refusal() -> None:
    with pytest.raises(WebhookError) as caught:
        await resolve(check_url("https://no-such-host.invalid/", STRICT), STRICT)
    assert caught.value.code == "WEBHOOK_DNS_FAILED"


def test_retry_after_both_forms() -> None:
    assert retry_after_seconds("120", None) == 120
    assert retry_after_seconds("0", None) is None  # unstated: the job's backoff
    assert retry_after_seconds("soon", None) is None
    for odd in ("\xb2", "\u0663", "1\xb2"):  # digits to str.isdigit, not to int() (a latin-1 header byte)
        assert retry_after_seconds(odd, None) is None
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    assert retry_after_seconds("Wed, 21 Oct 2026 07:30:00 GMT", date) == 120  # against the response's Date
    assert retry_after_seconds("Wed, 21 Oct 2026 07:20:00 GMT", date) is None  # in the past


def test_spread_never_sooner_and_clamped() -> None:
    for _ in range(100):
        assert 10 <= spread(10, 3600) <= 11
        assert spread(7200, 3600) == 3600


def test_status_classes() -> None:
    assert judge(204, {}, "", 1).status == "delivered"
    assert judge(410, {}, "", 1).status == "gone"
    throttled = judge(429, {"retry-after": "7"}, "", 1)
    assert (throttled.status, throttled.retry_after) == ("throttled", 7)
    assert judge(503, {}, "", 1).retry_after is None
    assert judge(429, {"retry-after": "\xb2"}, "", 1).retry_after is None
    moved = judge(302, {"location": "http://169.254.169.254/"}, "", 1)
    assert moved.status == "failed" and "not followed" in (moved.error or "")
    assert judge(500, {}, "", 1).status == "failed"


async def test_the_next_checked_address_is_tried_only_when_connecting_failed() -> None:
    from webhookkit import serving
    from workhorse.webhooks.wire import post

    with serving() as receiver:
        target = check_url(receiver.url, OPEN)
        nobody, listening = ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")
        answer = await post(target, [nobody, listening], {}, b"{}", 5)
        assert (answer.status, answer.response_code) == ("delivered", 200)
        assert len(receiver.received) == 1
        refused = await post(target, [nobody], {}, b"{}", 5)
        assert refused.status == "failed" and "ConnectError" in (refused.error or "")
