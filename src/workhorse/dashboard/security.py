"""The dashboard's security rules, as plain functions over headers and values (no web framework).

Design: docs/guides/dashboard.md
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote, urlsplit

from workhorse.errors import ConfigurationError, WorkhorseError

COOKIE = "workhorse_dashboard"
TOKEN_PARAMETER = "token"  # noqa: S105 - the query parameter's name
_SESSION_TAG = b"workhorse-dashboard-session"
_CSRF_TAG = b"workhorse-dashboard-csrf"
# A Host header: a name or IPv4 address, or a bracketed IPv6 one, then an optional port.
_HOST = re.compile(r"^(?:\[(?P<v6>[^\[\]]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>\d{0,5}))?$")


class DashboardRefusal(WorkhorseError):
    """A request the dashboard refuses: its HTTP status with the code, cause and fix."""

    code = "DASHBOARD_REFUSED"

    def __init__(self, status: int, cause: str, fix: str, *, code: str) -> None:
        super().__init__(cause, fix, code=code)
        self.status = status


def text_fields(raw: bytes, what: str) -> list[tuple[str, str]]:
    """The fields of a query string or an action's form, read as UTF-8 only: text that is not
    UTF-8 is refused (DASHBOARD_INPUT_INVALID), never decoded with replacement characters and acted
    on (``queue=%FF%FE`` would name a queue ``"\ufffd\ufffd"``)."""
    try:
        return parse_qsl(raw.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise DashboardRefusal(
            400,
            f"the {what} is not UTF-8 text (a byte or a percent-escape that is no UTF-8 character)",
            "send every field as UTF-8, percent-encoded: a browser's own forms and links do",
            code="DASHBOARD_INPUT_INVALID",
        ) from None


def own_path(path: str) -> str:
    """``path`` as a redirect target that can only be a path of this origin: the leading slashes
    and backslashes a browser would read as another host (``//evil.example``, ``/\\evil``) folded
    into one, and every character a browser strips or reinterprets (controls, spaces, backslashes)
    percent-encoded."""
    return "/" + quote(path.lstrip("/\\"), safe="/:@!$&'()*+,;=-._~")


def is_loopback(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` and ``::1`` (brackets allowed) are loopback; names are not."""
    bare = host.strip().strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str | None:
    """The host name of a ``Host`` header (``[::1]:8000`` -> ``::1``), or None when it is not one."""
    found = _HOST.match(header)
    return None if found is None else (found["v6"] or found["name"])


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on an address other than loopback without a token."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            code="DASHBOARD_TOKEN_REQUIRED",
            cause=f"the dashboard would listen on {host!r}, which is not loopback, without a token: anyone "
            "who can reach it could requeue or remove jobs",
            fix='workhorse dashboard --bind 0.0.0.0:8000 --token "$(openssl rand -hex 16)"   '
            "# or export WORKHORSE_DASHBOARD_TOKEN, or --bind 127.0.0.1:8000",
        )


def check_token(token: str | None) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str) or len(token.strip()) < 8 or token != token.strip():
        raise ConfigurationError(
            code="DASHBOARD_TOKEN_INVALID",
            cause="a dashboard token expected at least 8 characters without surrounding spaces, got "
            f"{len(token) if isinstance(token, str) else token!r} characters",
            fix='workhorse dashboard --token "$(openssl rand -hex 16)"',
        )
    return token


class Guard:
    """The token and CSRF rules of one dashboard."""

    def __init__(self, token: str | None) -> None:
        self.token = check_token(token)
        self._secret = secrets.token_bytes(32)
        key = self.token.encode() if self.token is not None else self._secret
        self.session = hmac.new(key, _SESSION_TAG, hashlib.sha256).hexdigest()
        self.csrf = hmac.new(self._secret, _CSRF_TAG, hashlib.sha256).hexdigest()

    def check_host(self, headers: Mapping[str, str], local_url: str) -> None:
        """Without a token, DASHBOARD_HOST_REFUSED unless the request's ``Host`` names loopback
        (the DNS rebinding defence); with one, any host. ``local_url`` is the address the fix
        names (``http://127.0.0.1:PORT/``)."""
        if self.token is not None:
            return
        given = headers.get("host", "")
        name = host_name(given)
        if name is not None and name == name.strip() and is_loopback(name):
            return
        raise DashboardRefusal(
            403,
            f"this dashboard has no token, so it answers only requests for a loopback host (localhost, "
            f"127.0.0.1, [::1]); this one was for {given or 'no Host'!r}, which a page of another site "
            "could be re-pointed to (DNS rebinding)",
            f"browse {local_url}, or give the dashboard a token (--token, WORKHORSE_DASHBOARD_TOKEN, "
            "make_asgi_app(app, token=...)) to serve it under another name",
            code="DASHBOARD_HOST_REFUSED",
        )

    def admits(self, headers: Mapping[str, str], cookies: Mapping[str, str], query_token: str | None) -> str:
        """``open`` (no token asked: ``check_host`` keeps it to loopback names), ``ok`` (a bearer
        or the cookie), ``login`` (``?token=`` right: set the cookie) or raise DASHBOARD_UNAUTHORIZED."""
        if self.token is None:
            return "open"
        given = headers.get("authorization", "")
        if given[:7].lower() == "bearer " and _same(given[7:].strip(), self.token):
            return "ok"
        if _same(cookies.get(COOKIE, ""), self.session):
            return "ok"
        if query_token is not None and _same(query_token, self.token):
            return "login"
        wrong = bool(given) or query_token is not None
        raise DashboardRefusal(
            401,
            "the token given does not match this dashboard's" if wrong else "this dashboard asks for a token",
            "open the dashboard as /?token=YOUR_TOKEN once (a session cookie keeps you in), or send "
            "Authorization: Bearer YOUR_TOKEN",
            code="DASHBOARD_UNAUTHORIZED",
        )

    def check_post(self, headers: Mapping[str, str], csrf: str | None) -> None:
        """An action's origin and CSRF token, or DASHBOARD_ORIGIN_REFUSED / DASHBOARD_CSRF_INVALID."""
        host = headers.get("host", "")
        origin = headers.get("origin")
        source = origin if origin not in (None, "") else headers.get("referer")
        if not source or source == "null" or urlsplit(source).netloc.lower() != host.lower():
            raise DashboardRefusal(
                403,
                f"an action came from {source or 'no named page'!r}, not from this dashboard ({host})",
                "use the dashboard's own buttons; a proxy in front must pass the Host header through",
                code="DASHBOARD_ORIGIN_REFUSED",
            )
        if csrf is None or not _same(csrf, self.csrf):
            raise DashboardRefusal(
                403,
                "the action's form carried no valid CSRF token (the page may be from before a restart)",
                "reload the page and click again",
                code="DASHBOARD_CSRF_INVALID",
            )


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())
