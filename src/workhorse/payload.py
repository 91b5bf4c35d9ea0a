"""Payload validation and encoding: JSON only, checked before anything is written.

A payload must survive a trip through Postgres ``jsonb`` unchanged, so we refuse at enqueue what
``jsonb`` would refuse or silently change later: values that are not JSON (datetime, Decimal,
bytes, set, objects), NaN and Infinity, a NUL character anywhere, keys that are not strings,
nesting deeper than ``MAX_DEPTH``, and an encoded size over the limit (1 MiB by default). The
error names the path of the first offending value (``$.items[3].price``). Never pickle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from json import encoder as _json_encoder
from typing import Any

from workhorse.errors import PayloadError

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def _refuse(what: str, path: str, value: Any, fix: str) -> PayloadError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return PayloadError(cause=f"{what} at {path}: {shown}", fix=fix)


def _check(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _refuse(
            f"payload nests deeper than {MAX_DEPTH} levels",
            path,
            type(value).__name__,
            "flatten the structure, or store the document elsewhere and pass its id",
        )
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse("NaN and Infinity are not JSON", path, value, "send null or a string instead")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise _refuse(
                "a NUL character (\\u0000) cannot be stored in Postgres jsonb",
                path,
                value,
                "strip it: value.replace('\\x00', '')",
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
            if "\x00" in key:
                raise _refuse("a NUL character cannot be stored in a jsonb key", path, key, "rename the key")
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


def encode(payload: Any, *, max_bytes: int = DEFAULT_MAX_BYTES, what: str = "payload") -> str:
    """Validate ``payload`` and answer its compact JSON text, or raise ``PayloadError``."""
    if payload is None:  # the commonest result of all
        return "null"
    try:
        text = _fast(payload) if _plain(payload, 0) else None
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is None or "\\u0000" in text:  # not plain JSON, or a NUL somewhere (escaped by the encoder)
        _check(payload, "$", 0)  # raises with the path of the offending value
        text = _ENCODER.encode(payload)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
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
