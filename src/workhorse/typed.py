"""Typed payloads: the body's payload annotation decides what a job takes and what its body gets.

Design: docs/guides/typed-payloads.md
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import logging
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Literal, Union, get_args, get_origin

import typing_extensions
from typing_extensions import is_typeddict

from workhorse.errors import PayloadError

log = logging.getLogger("workhorse.typed")
_UNTYPED: tuple[Any, ...] = (Any, object, dict, Mapping, inspect.Parameter.empty)


class Invalid(Exception):
    """One field that does not fit: where (``$.items[0].price``) and what was expected."""

    def __init__(self, path: str, expected: str, value: Any) -> None:
        shown = repr(value)
        super().__init__(f"{path}: expected {expected}, got {shown if len(shown) <= 60 else shown[:57] + '...'}")
        self.path = path


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


class PayloadType:
    """How one job's payload type is validated (``build``) and stored (``plain``)."""

    def __init__(self, tp: type, kind: Literal["pydantic", "dataclass", "typeddict"]) -> None:
        self.type = tp
        self.kind = kind

    def __repr__(self) -> str:
        return f"<PayloadType {self.kind} {self.type.__qualname__}>"

    def build(self, value: Any) -> Any:
        """The typed value for ``value`` (an instance, or its JSON form); raises ``Invalid``."""
        if self.kind == "pydantic":
            return _pydantic_build(self.type, value, "$")
        return _build(value, self.type, "$")

    def plain(self, value: Any) -> Any:
        """The JSON form of a value ``build`` answered."""
        if self.kind == "pydantic":
            return value.model_dump(mode="json")
        return _plain(value)

    def dump(self, payload: Any, *, job: str) -> Any:
        """At enqueue: validate ``payload`` and answer what is stored. Raises ``PAYLOAD_INVALID``."""
        return self.plain(self.dump_value(payload, job=job))

    def dump_value(self, payload: Any, *, job: str) -> Any:
        """At enqueue: ``payload`` validated, as the body's type. Raises ``PAYLOAD_INVALID``."""
        try:
            return self.build(payload)
        except Invalid as error:
            raise PayloadError(
                cause=f"job {job!r} takes a {self.type.__qualname__} payload; field {error}",
                fix=f"pass a valid {self.type.__qualname__} (or a dict of its fields) to enqueue",
            ) from None

    def load(self, data: Any, *, job: str) -> Any:
        """In the worker: the stored JSON as the body's type. Raises ``PAYLOAD_INVALID``."""
        try:
            if self.kind == "pydantic":  # the row is JSON: JSON-mode rules (a strict model takes its
                return _pydantic_build(self.type, json.dumps(data), "$", from_json=True)  # ISO dates)
            return self.build(data)
        except Invalid as error:
            raise PayloadError(
                cause=f"job {job!r}: the stored payload no longer fits {self.type.__qualname__}; field {error}",
                fix="requeue it with a payload that fits (workhorse show ID prints the stored one), "
                "or make the model accept old rows (a default for the new field)",
            ) from None


def payload_type_of(fn: Callable[..., Any], job: str) -> PayloadType | None:
    """The payload type a body declares (its second parameter's annotation), or None: untyped."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if len(parameters) < 2 or parameters[1].annotation is inspect.Parameter.empty:
        return None
    annotation = parameters[1].annotation
    if isinstance(annotation, str):
        target = inspect.unwrap(fn)
        probe = types.SimpleNamespace(__annotations__={"payload": annotation})
        try:
            annotation = typing.get_type_hints(probe, globalns=getattr(target, "__globals__", None))["payload"]
        except Exception as error:  # once per handle: JobHandle caches what this answers
            log.warning(
                "job %s: its payload annotation %r could not be resolved (%s: %s); the body gets the "
                "decoded JSON, unvalidated",
                job, annotation, type(error).__name__, error,
            )  # fmt: skip
            return None
    return classify(annotation)


def classify(tp: Any) -> PayloadType | None:
    """A ``PayloadType`` for a pydantic model, a dataclass or a TypedDict; None for anything else."""
    if any(tp is untyped for untyped in _UNTYPED) or not isinstance(tp, type):
        return None
    if is_typeddict(tp):
        return PayloadType(tp, "typeddict")
    if dataclasses.is_dataclass(tp):
        return PayloadType(tp, "dataclass")
    if _is_model(tp):
        return PayloadType(tp, "pydantic")
    return None


def _is_model(tp: Any) -> bool:
    pydantic = sys.modules.get("pydantic")  # a model annotation means the user imported it
    return pydantic is not None and isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _pydantic_build(tp: Any, value: Any, path: str, *, from_json: bool = False) -> Any:
    from pydantic import ValidationError

    try:
        return tp.model_validate_json(value) if from_json else tp.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = path
        for part in first.get("loc", ()):
            where = _child(where, part)
        raise Invalid(where, first.get("msg", "a valid value").lower(), first.get("input")) from None


def _hints(tp: Any) -> dict[str, Any]:
    return typing.get_type_hints(tp)


def _build(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against ``tp`` and answer it as that type (nested structures rebuilt)."""
    if tp is Any or tp is object or isinstance(tp, typing.TypeVar):
        return value
    if tp is None or tp is type(None):
        if value is not None:
            raise Invalid(path, "null", value)
        return None
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        for arm in get_args(tp):
            try:
                return _build(value, arm, path)
            except Invalid:
                continue
        raise Invalid(path, " or ".join(_name(arm) for arm in get_args(tp)), value)
    if origin is Literal:
        if value not in get_args(tp) or isinstance(value, bool) != any(isinstance(a, bool) for a in get_args(tp)):
            raise Invalid(path, f"one of {list(get_args(tp))!r}", value)
        return value
    if origin is typing.Annotated:
        return _build(value, get_args(tp)[0], path)
    if origin in (list, tuple, set, frozenset) or origin is Sequence:
        return _sequence(value, tp, origin, path)
    if origin in (dict, Mapping) or tp is dict:
        args = get_args(tp)
        if not isinstance(value, dict):
            raise Invalid(path, "an object", value)
        item = args[1] if len(args) == 2 else Any
        return {_key(k, path): _build(v, item, _child(path, str(k))) for k, v in value.items()}
    if not isinstance(tp, type):
        return value
    if tp is bool:
        if type(value) is not bool:
            raise Invalid(path, "a boolean", value)
        return value
    if tp is int:
        if type(value) is not int:
            raise Invalid(path, "an integer", value)
        return value
    if tp is float:
        if type(value) not in (int, float):
            raise Invalid(path, "a number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise Invalid(path, "a string", value)
        return value
    if is_typeddict(tp):
        return _typeddict(value, tp, path)
    if dataclasses.is_dataclass(tp):
        return _dataclass(value, tp, path)
    if _is_model(tp):
        return _pydantic_build(tp, value, path)
    if issubclass(tp, enum.Enum):
        try:
            return value if isinstance(value, tp) else tp(value)
        except ValueError:
            raise Invalid(path, f"one of {[m.value for m in tp]!r}", value) from None
    if tp in (datetime, date, uuid.UUID):
        return _scalar(value, tp, path)
    return value  # an annotation we do not check: the JSON check at encode still applies


def _name(tp: Any) -> str:
    return "null" if tp is type(None) else getattr(tp, "__qualname__", repr(tp))


def _key(key: Any, path: str) -> str:
    if not isinstance(key, str):
        raise Invalid(_child(path, str(key)), "a string key", key)
    return key


def _sequence(value: Any, tp: Any, origin: Any, path: str) -> Any:
    if not isinstance(value, list | tuple):
        raise Invalid(path, "an array", value)
    args = get_args(tp)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise Invalid(path, f"an array of {len(args)} items", value)
        return tuple(_build(v, a, _child(path, i)) for i, (v, a) in enumerate(zip(value, args, strict=True)))
    item = args[0] if args else Any
    built = [_build(v, item, _child(path, i)) for i, v in enumerate(value)]
    return tuple(built) if origin is tuple else built


def _fields(value: Any, tp: Any, path: str, names: Sequence[str]) -> dict[str, Any]:
    """The field values of ``value``: a dict of them (no unknown keys), or an instance's attributes."""
    if isinstance(value, dict):
        for key in value:
            if key not in names:
                raise Invalid(_child(path, str(key)), f"no such field (the fields of {tp.__qualname__}: "
                              f"{', '.join(names)})", value[key])  # fmt: skip
        return value
    if isinstance(value, tp):
        return {name: getattr(value, name) for name in names if hasattr(value, name)}
    raise Invalid(path, f"a {tp.__qualname__} or an object of its fields", value)


def _dataclass(value: Any, tp: Any, path: str) -> Any:
    declared = [f for f in dataclasses.fields(tp) if f.init]
    hints = _hints(tp)
    given = _fields(value, tp, path, [f.name for f in declared])
    built: dict[str, Any] = {}
    for field in declared:
        if field.name in given:
            built[field.name] = _build(given[field.name], hints.get(field.name, Any), _child(path, field.name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise Invalid(_child(path, field.name), "a value (the field is required)", None)
    return tp(**built)


_OPTIONAL_KEY = {typing.NotRequired, typing_extensions.NotRequired}
_REQUIRED_KEY = {typing.Required, typing_extensions.Required}


def _typeddict(value: Any, tp: Any, path: str) -> dict[str, Any]:
    """A TypedDict's keys, read from its hints (``__required_keys__`` misses ``NotRequired`` written
    as a string annotation on Python 3.11)."""
    hints = typing.get_type_hints(tp, include_extras=True)
    given = _fields(value, dict, path, list(hints))
    types_of: dict[str, Any] = {}
    for name, hint in hints.items():
        origin = get_origin(hint)
        required = origin in _REQUIRED_KEY or (origin not in _OPTIONAL_KEY and getattr(tp, "__total__", True))
        types_of[name] = get_args(hint)[0] if origin in _OPTIONAL_KEY | _REQUIRED_KEY else hint
        if required and name not in given:
            raise Invalid(_child(path, name), "a value (the key is required)", None)
    return {name: _build(item, types_of[name], _child(path, name)) for name, item in given.items()}


def _scalar(value: Any, tp: Any, path: str) -> Any:
    if isinstance(value, tp) and not (tp is date and isinstance(value, datetime)):
        return value
    if isinstance(value, str):
        try:
            if tp is uuid.UUID:
                return uuid.UUID(value)
            return datetime.fromisoformat(value) if tp is datetime else date.fromisoformat(value)
        except ValueError:
            pass
    raise Invalid(path, f"an ISO 8601 {tp.__name__} text" if tp is not uuid.UUID else "a UUID text", value)


def _plain(value: Any) -> Any:
    """The JSON form of a built value: models dumped, dataclasses as objects, enums by value."""
    if value is None or isinstance(value, str | int | float):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # init fields only: build() takes nothing else back, and __post_init__ derives the rest again
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    dump = getattr(value, "model_dump", None)
    if dump is not None and _is_model(type(value)):
        return dump(mode="json")
    return value
