"""The SSRF guard: which URLs an endpoint may have, and which addresses a delivery may connect to.

Design: docs/guides/webhooks.md
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from workhorse.webhooks.errors import WebhookError
from workhorse.webhooks.policy import WebhookPolicy

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL = 2048


@dataclass(frozen=True)
class Target:
    """A checked URL: scheme, host (a name or an address literal), port, and path with query."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def url_for(self, address: IPAddress) -> str:
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def check_url(url: object, policy: WebhookPolicy) -> Target:
    """Parse and check an endpoint URL (``WEBHOOK_URL_INVALID``, ``WEBHOOK_URL_REFUSED``). An address
    literal is checked here too; a name is resolved at delivery."""
    fix = "add_endpoint('https://example.com/hooks', tenant=..., events=[...])"
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise WebhookError(
            code="WEBHOOK_URL_INVALID",
            cause=f"an endpoint URL must be text of 1 to {MAX_URL} characters, got {str(url)[:80]!r}",
            fix=fix,
        )
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as error:
        raise WebhookError(code="WEBHOOK_URL_INVALID", cause=f"URL {url!r} does not parse: {error}", fix=fix) from error
    if parts.scheme not in ("https", "http") or not host:
        raise WebhookError(
            code="WEBHOOK_URL_INVALID",
            cause=f"URL {url!r} is not an http(s) URL with a host",
            fix=fix,
        )
    if parts.username is not None or parts.password is not None:
        raise WebhookError(
            code="WEBHOOK_URL_INVALID",
            cause=f"URL {parts.scheme}://***@{host}... carries credentials; they would travel in every delivery",
            fix="drop the user:password@ part; the signature is how the receiver knows it is us",
        )
    if parts.scheme == "http" and not policy.allow_http:
        raise WebhookError(
            code="WEBHOOK_URL_REFUSED",
            cause=f"URL {url!r} is plain http; this app delivers over https only",
            fix="use an https:// URL, or App(webhooks=WebhookPolicy(allow_http=True)) for local tests",
        )
    try:
        host = host.encode("idna").decode("ascii")  # the name resolved, sent in Host and for TLS
    except UnicodeError as error:
        raise WebhookError(
            code="WEBHOOK_URL_INVALID", cause=f"URL {url!r} has a host IDNA cannot encode: {error}", fix=fix
        ) from error
    default_port = 443 if parts.scheme == "https" else 80
    target = Target(parts.scheme, host, port or default_port, _path(parts.path, parts.query))
    literal = _literal(host)
    if literal is not None:
        check_address(literal, host, policy)
    # What post() builds: the URL with an address in it (a placeholder here), the name in Host.
    why = unsendable(target.url_for(_PLACEHOLDER))
    if why is None and not host.isprintable():
        why = f"the host {host!r} has a non-printable character"
    if why is not None:
        raise WebhookError(code="WEBHOOK_URL_INVALID", cause=f"URL {url!r} cannot be sent: {why}", fix=fix)
    return target


def unsendable(url: str) -> str | None:
    """Why httpx would refuse to send to ``url`` (a non-printable character, say), or None. httpx is
    imported here only when a URL is checked, as ``wire`` imports it only to send."""
    try:
        import httpx
    except ImportError:  # without the webhooks extra nothing is ever sent; add_endpoint works as before
        return None
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as error:
        return str(error)
    return None


def _path(path: str, query: str) -> str:
    return (path or "/") + (f"?{query}" if query else "")


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def refusal(address: IPAddress) -> str | None:
    """Why a delivery may not connect to ``address`` (None: it is a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            inner = refusal(embedded)
            return None if inner is None else f"{inner} (inside the IPv6 address {address})"
        if address in _NAT64:
            inner = refusal(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
            return None if inner is None else f"{inner} (inside the NAT64 address {address})"
    for kind, test in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),  # fec0::/10
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if test:
            return f"{address} is a {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_PLACEHOLDER = ipaddress.IPv4Address("192.0.2.1")  # TEST-NET-1: only ever parsed, never connected to


def check_address(address: IPAddress, host: str, policy: WebhookPolicy) -> None:
    if policy.allow_private:
        return
    why = refusal(address)
    if why is not None:
        raise WebhookError(
            code="WEBHOOK_ADDRESS_REFUSED",
            cause=f"host {host!r} resolves to {why}; deliveries go to public addresses only (SSRF guard)",
            fix="point the endpoint at a public host, or App(webhooks=WebhookPolicy(allow_private=True)) "
            "for tests on 127.0.0.1",
        )


async def resolve(target: Target, policy: WebhookPolicy) -> list[IPAddress]:
    """The addresses to connect to, in the resolver's order: the literal itself, or the name's
    addresses once every one of them passed the check (``WEBHOOK_ADDRESS_REFUSED``,
    ``WEBHOOK_DNS_FAILED``)."""
    literal = _literal(target.host)
    if literal is not None:
        check_address(literal, target.host, policy)
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(policy.timeout):  # the resolver's thread may go on; we do not wait
            infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except TimeoutError as error:
        raise WebhookError(
            code="WEBHOOK_DNS_FAILED",
            cause=f"host {target.host!r} did not resolve within the timeout of {policy.timeout:g}s",
            fix="check the endpoint's URL (workhorse webhooks ls) and this host's resolver",
        ) from error
    except (OSError, UnicodeError) as error:  # UnicodeError: a name IDNA cannot encode
        raise WebhookError(
            code="WEBHOOK_DNS_FAILED",
            cause=f"host {target.host!r} did not resolve: {error}",
            fix="check the endpoint's URL: workhorse webhooks ls",
        ) from error
    addresses: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            found = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if found not in addresses:
                addresses.append(found)
    if not addresses:
        raise WebhookError(
            code="WEBHOOK_DNS_FAILED",
            cause=f"host {target.host!r} resolved to no IPv4 or IPv6 address",
            fix="check the endpoint's URL: workhorse webhooks ls",
        )
    for address in addresses:
        check_address(address, target.host, policy)
    return addresses
