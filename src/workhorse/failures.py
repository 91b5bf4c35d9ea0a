"""The shape of ``last_error``: the exception type, its message and a trimmed traceback, as JSON.

One shape for a job's failed attempt and a failed step (``ctx.step.run``), so the CLI, the admin
API and the dashboard read both the same way.
"""

from __future__ import annotations

import json
import traceback

from workhorse.storable import storable

TRACEBACK_LIMIT = 8_000
MESSAGE_LIMIT = 2_000


def error_json(error: BaseException) -> str:
    """``last_error``: the exception type, message and a trimmed traceback. Never raises: an
    exception whose ``__str__`` raises (or answers no string) is recorded by its type, with a
    message saying its own could not be read."""
    kind = type(error).__qualname__
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception as failed:  # whatever the exception does, the attempt is recorded
        text = f"{kind}: (its traceback could not be formatted: {type(failed).__qualname__})\n"
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    try:
        message = str(error)
    except Exception as failed:  # a __str__ that raises, or answers no string
        message = f"(the message of this {kind} could not be read: its __str__ raised {type(failed).__qualname__})"
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + "..."
    return json.dumps(
        {
            "type": storable(kind),
            "message": storable(message),
            "traceback": storable(text),
        }
    )
