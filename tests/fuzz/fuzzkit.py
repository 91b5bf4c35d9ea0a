"""What the fuzz tests share: hostile values (arbitrary Unicode with surrogates and controls
included, numbers at and past every edge, nested JSON and things that are not JSON), the check
that a stored value reads back as it was sent, and a loop to run the async API from a sync
hypothesis test."""

from __future__ import annotations

import asyncio
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from workhorse import WorkhorseError

# Every fuzz test runs a bounded number of examples, with no per-example deadline (a shared,
# busy database makes timings noisy); the function-scoped-fixture check is off because the
# module's app and loop are meant to be shared by every example.
EXAMPLES = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)

# What a third party's API really sends: controls and escapes, lone surrogates (json.loads yields
# them), NUL, bidi and zero-width characters, markup, long runs.
NASTY = [
    "\x00",
    "\ud800",
    "\udfff",
    "\x1b]0;title\x07",
    "\x1b[2J",
    "\x9b31m",
    "\r",
    "\x7f",
    "\u202e",
    "\u200b",
    "\ufeff",
    "\u2028",
    "[/]",
    "[bold]x[/bold]",
    "%FF",
    "\\u0000",
    "é",
    "☃",
    "\U0001f600",
]
ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates (Cs) and controls included
# At least one nasty piece in each hostile text, the ones the database refuses drawn most often.
WORST = ["\x00", "\ud800", "\udfff", "\x1b[2J"]
nasty = st.one_of(st.sampled_from(WORST), st.sampled_from(NASTY))
hostile_text = st.tuples(
    st.text(ANY_CHAR, max_size=6), nasty, st.lists(st.one_of(nasty, st.text(ANY_CHAR, max_size=6)), max_size=3)
).map(lambda parts: parts[0] + parts[1] + "".join(parts[2]))
text = st.one_of(st.text(max_size=12), hostile_text)  # half of it ordinary text (no surrogates)
# Text PostgreSQL stores (no NUL, no lone surrogate) but a terminal would obey, for what is printed.
STORABLE_NASTY = [n for n in NASTY if "\x00" not in n and not any(0xD800 <= ord(c) <= 0xDFFF for c in n)]
STORABLE_CHAR = st.characters(codec=None, exclude_categories=("Cs",), exclude_characters="\x00")
storable_text = (
    st.lists(st.one_of(st.sampled_from(STORABLE_NASTY), st.text(STORABLE_CHAR, max_size=8)), min_size=1, max_size=6)
    .map("".join)
    .filter(lambda t: 0 < len(t) <= 200)
)
names = st.one_of(text, st.sampled_from(["default", "emails", "a" * 200, "a" * 201, " ", ""]))

EDGE_INTS = [0, -1, 2**31, 2**63, -(2**63) - 1]
# 10**e drawn by its exponent: a strategy listing a 5000-digit int could not even describe itself
huge_ints = st.sampled_from([4299, 4300, 5000]).flatmap(lambda e: st.sampled_from([10**e, -(10**e)]))
EDGE_FLOATS = [0.0, -0.0, 5e-324, 1e-300, 0.1, 9999999999999998.0, 1e16, 1.5e20, 1e300, -1e308]
numbers = st.one_of(
    st.integers(),
    st.sampled_from(EDGE_INTS),
    huge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_FLOATS),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
not_json = st.sampled_from([datetime(2026, 1, 1, tzinfo=UTC), b"bytes", {1, 2}, object(), 1 + 2j, {3: "int key"}])
storable_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(min_value=-1e15, max_value=1e15).map(lambda f: f + 0.0),  # + 0.0: no negative zero
        storable_text,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(storable_text, inner, max_size=4)),
    max_leaves=8,
)
payloads = st.one_of(json_values, not_json, st.dictionaries(text, st.one_of(json_values, not_json), max_size=3))

durations = st.one_of(
    st.integers(),
    st.sampled_from([10**20, 36_525 * 86_400, 36_525 * 86_400 + 1]),
    st.just(400).map(lambda e: 10**e),
    st.floats(allow_nan=True, allow_infinity=True),
    st.timedeltas(),
    st.sampled_from(["1e12", "3000000d", "99999999d", "36525d", "36526d", "9" * 400 + "d", "250ms", "1.5h", " 5m "]),
    text,
    st.booleans(),
)
instants = st.one_of(
    st.datetimes(timezones=st.just(UTC), min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.datetimes(),  # naive: refused
    # around now, up to past the bound either way
    st.timedeltas(min_value=timedelta(days=-700_000), max_value=timedelta(days=2_900_000)).map(
        lambda d: datetime(2026, 6, 1, tzinfo=UTC) + d
    ),
)

CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def refusal(error: BaseException) -> WorkhorseError:
    """``error`` as the refusal it must be: a WorkhorseError with an UPPER_SNAKE code, a cause and a
    fix, and never DATABASE_ERROR (a value the database refused is one the check let through)."""
    assert isinstance(error, WorkhorseError), f"a raw {type(error).__name__}: {error!r}"
    assert re.fullmatch(r"[A-Z][A-Z0-9_]+", error.code), error.code
    assert error.cause and error.fix, error.to_dict()
    assert not error.code.startswith("DATABASE"), error.to_dict()
    return error


def same(sent: Any, back: Any) -> bool:
    """``back`` is ``sent`` as JSON holds it: equal, of the same JSON type (an int stays an int, a
    float a float), a float's sign kept; tuples read back as lists, key order is free."""
    if isinstance(sent, bool) or sent is None or isinstance(sent, str):
        return type(back) is type(sent) and back == sent
    if isinstance(sent, int):
        return type(back) is int and back == sent
    if isinstance(sent, float):
        return type(back) is float and back == sent and math.copysign(1, back) == math.copysign(1, sent)
    if isinstance(sent, list | tuple):
        return isinstance(back, list) and len(back) == len(sent) and all(map(same, sent, back))
    if isinstance(sent, dict):
        return isinstance(back, dict) and back.keys() == sent.keys() and all(same(v, back[k]) for k, v in sent.items())
    return False


class Loop:
    """One event loop for a module's examples: hypothesis calls the test synchronously."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def run(self, coroutine: Any) -> Any:
        return self.runner.run(coroutine)

    def close(self) -> None:
        self.runner.close()


def declare_echo(app: Any) -> Any:
    """The job the enqueue fuzz uses (once per app): its tenant is the payload's ``t``."""
    if "fuzz.echo" in app.jobs:
        return app.jobs["fuzz.echo"]

    @app.job(name="fuzz.echo", tenant=lambda p: p["t"])
    async def echo(ctx: Any, payload: Any) -> Any:
        return payload.get("p")

    return echo
