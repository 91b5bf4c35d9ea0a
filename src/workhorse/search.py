"""Searching jobs by a payload field or an error's text: a person's spelling of a payload search
(``workhorse ls --payload``, the dashboard's field) and the checks ``app.admin.list`` makes of a
search. The drivers read a search on a walk bounded per page (``drivers/searching.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from workhorse.errors import ConfigurationError, PayloadError
from workhorse.payload import encode
from workhorse.storable import flaw

MAX_SEARCH_TEXT = 200  # characters of error text a search takes


def parse_payload_search(text: str) -> dict[str, Any]:
    """A person's payload search: a JSON object (``{"order": 42}``), or ``field=value`` where
    ``field`` may be dotted (``customer.id=7`` is ``{"customer": {"id": 7}}``) and ``value`` is read
    as JSON when it is JSON (``42``, ``true``, ``"42"``), else as text. Refused: SEARCH_INVALID."""
    spelled = text.strip()
    if spelled.startswith("{"):
        try:
            found = json.loads(spelled)
        except ValueError as error:
            cause = f"payload search {text!r} starts like a JSON object but is not one: {error}"
            raise _refused(cause) from None
        return checked_payload(found) or {}
    field, sep, raw = spelled.partition("=")
    if not sep or not field.strip() or any(not part.strip() for part in field.split(".")):
        raise _refused(f"payload search expected FIELD=VALUE or a JSON object, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    for part in reversed(field.strip().split(".")):
        value = {part.strip(): value}
    return dict(value)


def _refused(cause: str) -> ConfigurationError:
    return ConfigurationError(
        code="SEARCH_INVALID",
        cause=cause,
        fix="workhorse ls --payload order=42   # or --payload '{\"customer\": {\"id\": 7}}', --error 'timed out'",
    )


def checked_payload(payload: Any) -> dict[str, Any] | None:
    if payload is None:
        return None
    if not isinstance(payload, Mapping) or not payload:
        raise _refused(f"payload search expected a JSON object with at least one field, got {payload!r}")
    try:
        return dict(json.loads(encode(dict(payload))))
    except PayloadError as error:
        raise _refused(f"payload search {payload!r} is not JSON jsonb can store: {error.cause}") from None


def checked_error(error: Any) -> str | None:
    if error is None:
        return None
    if not isinstance(error, str) or not error.strip() or len(error) > MAX_SEARCH_TEXT or flaw(error):
        raise _refused(
            f"error search expected 1 to {MAX_SEARCH_TEXT} characters of text PostgreSQL can store "
            f"(no NUL, no lone surrogate), got {error!r}"
        )
    return error.strip()
