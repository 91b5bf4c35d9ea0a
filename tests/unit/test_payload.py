"""Payload encoding: the fast path and the slow, path-naming walk agree."""

from __future__ import annotations

import enum
import json
import sys
from collections import OrderedDict

import pytest

from workhorse import PayloadError
from workhorse.payload import MAX_DEPTH, encode


class Color(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    "payload",
    [
        {"a": 1, "b": [1, 2.5, None, True], "c": {"d": "é ☃"}},
        OrderedDict(a=1),  # a dict subclass
        {"color": Color.RED},  # a str subclass
        {"text": "a literal backslash-u0000: \\u0000"},  # not a NUL character
        [(1, 2), (3,)],
    ],
)
def test_accepted_payloads_round_trip(payload: object) -> None:
    text = encode(payload)
    assert json.loads(text) == json.loads(json.dumps(payload))


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({True: 1}, "$.True"),
        ({"a": {None: 1}}, "$.a.None"),
        ({"deep": [{"x": "nul\x00"}]}, "$.deep[0].x"),
        ({"k\x00": 1}, "$"),
    ],
)
def test_refusals_name_the_path(payload: object, path: str) -> None:
    with pytest.raises(PayloadError) as refused:
        encode(payload)
    assert f"at {path}:" in refused.value.cause


def test_depth_limit_is_exact() -> None:
    def nest(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    encode(nest(MAX_DEPTH))
    with pytest.raises(PayloadError, match="deeper than"):
        encode(nest(MAX_DEPTH + 1))
    with pytest.raises(PayloadError, match="deeper than"):
        encode(nest(10_000))


def test_size_is_counted_in_utf8_bytes() -> None:
    encode({"s": "é" * 40}, max_bytes=90)  # 80 bytes of é plus the frame
    with pytest.raises(PayloadError) as refused:
        encode({"s": "é" * 50}, max_bytes=90)
    assert refused.value.code == "PAYLOAD_TOO_LARGE"


def test_a_cycle_is_refused_not_recursed_forever() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    ring: dict[str, object] = {}
    ring["self"] = ring
    for payload in (loop, ring, {"inner": OrderedDict(a=ring)}):
        with pytest.raises(PayloadError, match="deeper than"):
            encode(payload)


@pytest.mark.parametrize("payload", [None, 0, -7, 2.5, True, 'é"\\', [], {}, [1e15, 2.5e-308]])
def test_every_json_value_encodes_like_json_dumps(payload: object) -> None:
    assert encode(payload) == json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("payload", [float("nan"), {"x": [1, float("inf")]}, {"when": object()}])
def test_values_that_are_not_json_are_refused(payload: object) -> None:
    with pytest.raises(PayloadError):
        encode(payload)


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"from_api": json.loads('"\\ud800"')}, "$.from_api"),  # a lone surrogate, as json.loads yields it
        ({"list": ["ok", "a\udfffb"]}, "$.list[1]"),
        ({"k\ud800": 1}, "$"),  # a key: the object holding it is named
    ],
)
def test_lone_surrogates_are_refused_with_the_path(payload: object, path: str) -> None:
    with pytest.raises(PayloadError) as refused:
        encode(payload)
    assert refused.value.code == "PAYLOAD_INVALID"
    assert f"at {path}:" in refused.value.cause and "lone surrogate" in refused.value.cause


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"n": 10**5000}, "$.n"),  # more digits than Python reads back
        ({"big": [1.5e20]}, "$.big[0]"),  # jsonb reads it back as an int
        ({"x": 1e300}, "$.x"),  # ... and 10**300 is not 1e300
        ({"zero": -0.0}, "$.zero"),  # jsonb has no negative zero
        (-1e16, "$"),
    ],
)
def test_numbers_jsonb_would_change_are_refused(payload: object, path: str) -> None:
    with pytest.raises(PayloadError) as refused:
        encode(payload)
    assert refused.value.code == "PAYLOAD_NUMBER_CHANGED"
    assert f"at {path}:" in refused.value.cause


@pytest.mark.parametrize("value", [9999999999999998.0, 1e-300, 5e-324, -0.05, 0.0, 10**4299, "1e+16 and -0.0 as text"])
def test_numbers_jsonb_keeps_are_accepted(value: object) -> None:
    assert json.loads(encode({"v": value})) == {"v": value}


def test_a_huge_int_is_refused_where_the_process_raised_the_digit_limit() -> None:
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # this process could write it; a reader elsewhere could not parse it
    try:
        with pytest.raises(PayloadError) as refused:
            encode({"n": 10**5000})
    finally:
        sys.set_int_max_str_digits(previous)
    assert refused.value.code == "PAYLOAD_NUMBER_CHANGED" and "at $.n:" in refused.value.cause
