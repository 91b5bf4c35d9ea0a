"""What PostgreSQL can store as text: UTF-8 without a NUL character.

Two kinds of Python ``str`` cannot be written to a ``text`` or ``jsonb`` column: one holding a NUL
(``\\x00``; PostgreSQL text has none) and one holding a lone surrogate (``\\ud800`` as
``json.loads('"\\\\ud800"')`` yields it; UTF-8 has no encoding for it). ``flaw`` names the first
such character, so a refusal can say which and where instead of failing later in the driver.
"""

from __future__ import annotations


def flaw(text: str) -> str | None:
    """Why ``text`` cannot be stored (the character and its index), or None when it can."""
    at = text.find("\x00")
    if at >= 0:
        return f"a NUL character (\\x00) at index {at}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"a lone surrogate ({text[error.start]!r}) at index {error.start} (it has no UTF-8 form)"
    return None
