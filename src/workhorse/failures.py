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
    """``last_error``: the exception type, message and a trimmed traceback."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    message = str(error)
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + "..."
    return json.dumps(
        {
            "type": storable(type(error).__qualname__),
            "message": storable(message),
            "traceback": storable(text),
        }
    )
