"""What PostgreSQL can store as text: UTF-8 without a NUL character.

Design: docs/guides/jobs.md
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


NUL_MARK = "\\x00"


def storable(text: str) -> str:
    """``text`` with every NUL and every lone surrogate written as its escape (``\\x00``, ``\\udXXX``)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: its escape, as repr() would write it
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if "\x00" in text:
        text = text.replace("\x00", NUL_MARK)
    return text
