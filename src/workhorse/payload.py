"""Payload validation and encoding: JSON only, checked before anything is written.

Design: docs/guides/jobs.md
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from json import encoder as _json_encoder
from typing import Any

from workhorse.errors import PayloadError
from workhorse.storable import flaw

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_INT_DIGITS = 4300  # Python's default limit for reading an int from its decimal text
EXACT_FLOAT_LIMIT = 1e16  # from here on Python writes a float with an exponent, and jsonb reads it back as an int
_INT_LIMIT = 10**MAX_INT_DIGITS
# In encoded text, what may be a number jsonb changes: an exponent (1e+16) or a negative zero. A
# string holding the same characters only sends the payload down the slow path, which looks closer.
_MAY_CHANGE = re.compile(r"e\+|-0\.0(?![0-9])")
_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_INT_DIGITS + 1}}}")  # an int the encoder wrote where the limit was raised


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def _refuse(what: str, path: str, value: Any, fix: str, code: str | None = None) -> PayloadError:
    huge = isinstance(value, int) and abs(value) >= _INT_LIMIT  # repr() itself would raise
    shown = f"an int of {value.bit_length()} bits" if huge else repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return PayloadError(cause=f"{what} at {path}: {shown}", fix=fix, code=code)


def _check_number(value: int | float, path: str) -> None:
    """Refuse a number jsonb would store and hand back changed (see the module's docstring)."""
    if isinstance(value, int):
        if abs(value) >= _INT_LIMIT:
            raise _refuse(
                f"an int of more than {MAX_INT_DIGITS} digits would be stored but could not be read back "
                "(Python reads at most that many digits of an int)",
                path,
                value,
                "send it as a string: str(value) (with sys.set_int_max_str_digits raised where you make it)",
                code="PAYLOAD_NUMBER_CHANGED",
            )
        return
    if not math.isfinite(value):
        raise _refuse("NaN and Infinity are not JSON", path, value, "send null or a string instead")
    if value == 0.0 and math.copysign(1.0, value) < 0:
        raise _refuse(
            "-0.0 would read back as 0.0 (jsonb has no negative zero)",
            path,
            value,
            "send 0.0, or the sign separately",
            code="PAYLOAD_NUMBER_CHANGED",
        )
    if abs(value) >= EXACT_FLOAT_LIMIT:
        raise _refuse(
            f"a float of {EXACT_FLOAT_LIMIT:g} or more in magnitude would read back from jsonb as an int "
            "(its decimal digits: another type, and not always the same value)",
            path,
            value,
            "send int(value) when it is a whole number, or str(value) to keep the float's text",
            code="PAYLOAD_NUMBER_CHANGED",
        )


def _check(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _refuse(
            f"payload nests deeper than {MAX_DEPTH} levels",
            path,
            type(value).__name__,
            "flatten the structure, or store the document elsewhere and pass its id",
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int | float):
        _check_number(value, path)
        return
    if isinstance(value, str):
        wrong = flaw(value)
        if wrong is not None:
            raise _refuse(
                f"text holding {wrong} cannot be stored in Postgres jsonb",
                path,
                value,
                "strip NUL characters (value.replace('\\x00', '')); decode text with errors='replace' so no "
                "lone surrogate is left",
            )
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _refuse(
                    "a JSON object key must be a string",
                    _child(path, str(key)),
                    key,
                    "convert the key with str() before enqueueing",
                )
            wrong = flaw(key)
            if wrong is not None:
                raise _refuse(f"a key holding {wrong} cannot be stored in jsonb", path, key, "rename the key")
            _check(item, _child(path, key), depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, _child(path, index), depth + 1)
        return
    raise _refuse(
        f"{type(value).__name__} is not JSON",
        path,
        value,
        "convert it first: datetime -> .isoformat(), Decimal -> str(), bytes -> base64 text, set -> list",
    )


_CONTAINERS = (dict, list, tuple)


def _plain(value: Any, depth: int) -> bool:
    """The fast path's walk: string keys and bounded depth, recursing into containers only. Values
    are left to the strict encoder (it raises on NaN and on anything that is not JSON) and NUL to
    a scan of the encoded text; any doubt sends the payload to ``_check``, which names the path."""
    if depth >= MAX_DEPTH:
        return False
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) in _CONTAINERS and not _plain(item, depth + 1):
                return False
    elif type(value) is list or type(value) is tuple:
        for item in value:
            if type(item) in _CONTAINERS and not _plain(item, depth + 1):
                return False
    return True


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

# The fast path calls CPython's C encoder directly, built once: ``JSONEncoder.encode`` builds a new
# one on every call, which costs more than encoding a small payload. No circular-reference markers:
# ``_plain`` has already bounded the depth, so a cycle never reaches it. Same options as _ENCODER.
_make = getattr(_json_encoder, "c_make_encoder", None)  # None where the C accelerator is missing
_quote = getattr(_json_encoder, "c_encode_basestring", None)
_C_ENCODER: Callable[[Any, int], Sequence[str]] | None = (
    _make(None, _ENCODER.default, _quote, None, ":", ",", False, False, False) if _make and _quote else None
)


def _fast(payload: Any) -> str:
    if _C_ENCODER is None:
        return _ENCODER.encode(payload)
    return "".join(_C_ENCODER(payload, 0))


def _utf8_size(text: str) -> int | None:
    """The size of ``text`` in UTF-8, or None when it holds a lone surrogate (no UTF-8 at all)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def encode(payload: Any, *, max_bytes: int = DEFAULT_MAX_BYTES, what: str = "payload") -> str:
    """Validate ``payload`` and answer its compact JSON text, or raise ``PayloadError``."""
    if payload is None:  # the commonest result of all
        return "null"
    try:
        text = _fast(payload) if _plain(payload, 0) else None
    except (TypeError, ValueError, RecursionError):
        text = None
    size = None if text is None else _utf8_size(text)
    # not plain JSON, a NUL somewhere (escaped by the encoder), a lone surrogate, or a number jsonb may change
    if (
        text is None
        or size is None
        or "\\u0000" in text
        or _MAY_CHANGE.search(text)
        or (size > MAX_INT_DIGITS and _LONG_DIGITS.search(text))
    ):
        _check(payload, "$", 0)  # raises with the path of the offending value
        text = _ENCODER.encode(payload)
        size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise PayloadError(
            code="PAYLOAD_TOO_LARGE",
            cause=f"{what} is {size} bytes of JSON, over the limit of {max_bytes} bytes",
            fix="store large documents elsewhere (a table, object storage) and pass their id, "
            "or raise App(max_payload_bytes=...)",
        )
    return text


def encode_result(value: Any, *, job: str) -> str:
    """Encode a job's return value. A value that cannot be stored raises ``RESULT_INVALID`` (not
    JSON: the cause names the path of the bad value) or ``RESULT_TOO_LARGE``. The failure is
    deterministic, so the worker ends the job at once rather than running its body again."""
    try:
        return encode(value, max_bytes=DEFAULT_MAX_BYTES, what=f"the result of job {job!r}")
    except PayloadError as error:
        raise PayloadError(
            code="RESULT_TOO_LARGE" if error.code == "PAYLOAD_TOO_LARGE" else "RESULT_INVALID",
            cause=f"job {job!r} returned a value that cannot be stored: {error.cause}",
            fix=f"return JSON-compatible data from {job!r}, e.g. a datetime as value.isoformat() ({error.fix})",
        ) from None
