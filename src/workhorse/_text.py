"""Text the worker writes, made storable first: ``storable(s)``.

PostgreSQL refuses two things a Python ``str`` may hold: a NUL character (``text`` and ``jsonb``
cannot store U+0000) and a lone surrogate (``\\ud800`` alone is not Unicode, so it has no UTF-8
form; ``json.loads('"\\\\ud800"')`` yields one, and so does a third party's API). A settle carrying
either fails on every try, so every text a worker writes that it did not check itself (an
exception's type, message and traceback, a progress message) goes through ``storable`` first:
each bad character becomes its visible escape (``\\x00``, ``\\ud800``), the rest is kept as is.
Payloads and results are different: they are the user's data, refused with a code instead
(``workhorse.payload``).
"""

from __future__ import annotations

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
