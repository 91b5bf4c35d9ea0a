"""How workhorse logs: the job fields its records carry, the job logger bodies get, and the two
formats ``workhorse worker --log-format`` writes to stderr.

Design: docs/guides/operating.md
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any, Literal

from workhorse.ids import short_id

# C0 and C1 control characters (DEL too) but newline and tab, as the webhook excerpt finds them: in
# a terminal they are escape sequences (ESC ]0; sets the window title, ESC [2J clears the screen,
# a bare CR overwrites the line), never text.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(value: object) -> str:
    """``value`` as text a terminal prints and does not obey: every control character but newline
    and tab shown as its escape (``\\x1b``, ``\\x07``, ``\\x9b``). Every value from the
    database that the CLI prints (``styled``, the console's own strings, the table cells, before
    any column width cuts it, so no half sequence survives a cut) and every line the text log
    format writes goes through here."""
    text = str(value)
    return CONTROLS.sub(lambda found: f"\\x{ord(found[0]):02x}", text) if CONTROLS.search(text) else text


LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[str, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"
TEXT_DATE_FORMAT = "%H:%M:%S"
# The keys a record may carry beyond the message, in the order the json format writes them.
JOB_FIELDS = (
    "job_id",
    "job",
    "queue",
    "attempt",
    "outcome",
    "duration_ms",
    "error_type",
    "error_message",
    "worker_id",
)


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """``ctx.logger``: the job's logger (``workhorse.job.<name>``), every record carrying the
    job's id, name and attempt; a call's own ``extra`` is kept beside them."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class TextFormatter(logging.Formatter):
    """``time LEVEL message``; a body's records (``workhorse.job.*``) end with the job they are of."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT, TEXT_DATE_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = visible(super().format(record))  # a body's message or error may hold escape sequences
        if record.name.startswith("workhorse.job.") and hasattr(record, "job_id"):
            line += f"  [job {short_id(str(record.job_id))} attempt {getattr(record, 'attempt', '?')}]"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, then
    each of JOB_FIELDS the record carries, then ``exception`` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in JOB_FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def formatter(fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()
