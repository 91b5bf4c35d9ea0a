"""How the command line speaks: one JSON document on stdout, or rich text for a person.

Data goes to stdout; refusals and logs go to stderr, except that with ``--json`` a refusal is
the one JSON document on stdout (``{"error": {"code", "cause", "fix"}}``), so a script reading
stdout always gets something it can parse.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from workhorse.errors import WorkhorseError
from workhorse.logs import CONTROLS, visible

STATE_STYLES = {
    "ready": "cyan",
    "delayed": "blue",
    "running": "yellow",
    "suspended": "magenta",
    "done": "green",
    "failed": "red",
    "dead": "bold red",
    "cancelled": "dim",
}

_UNITS = ((86_400, "d"), (3_600, "h"), (60, "m"), (1, "s"))
_PASSWORD = re.compile(r"(?P<head>://[^:/@]+:)[^@]*@")


_C1_ESCAPES = re.compile("[\x7f-\x9f]")  # what json.dumps(ensure_ascii=False) leaves raw


class _Console(Console):
    """A console that shows control characters instead of sending them: each ``str`` it renders
    is made ``visible`` first (its width measured as shown), and any segment of text that still
    holds one (a ``Text`` built elsewhere) is escaped as it is written. The CLI's own styling is
    not text: rich writes it from styles, outside the segments' text."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(visible(text), **options)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Any:
        for segment in super().render(renderable, options):
            if segment.control is None and CONTROLS.search(segment.text):
                yield Segment(visible(segment.text), segment.style)
            else:
                yield segment


def console(*, err: bool = False, soft_wrap: bool = False) -> Console:
    """The one way the CLI builds a rich console: every ``str`` it is given is text, never markup.

    Job names, queues, tenants, keys, payloads, results, errors, progress messages, worker ids
    and hosts, pause reasons and task names come from the database or the operator: ``[/]`` or
    ``file:[/srv/in/a.csv]`` must print as written, not fail as markup, and ``[bold]`` or
    ``:thumbs_up:`` must not turn into styling or an emoji. So ``markup``, ``emoji`` and
    ``highlight`` are off for every ``str`` printed or put in a table cell; the CLI's own styling
    is always a ``rich.text.Text`` with an explicit style (``styled``, ``state_text``).
    """
    return _Console(stderr=err, markup=False, emoji=False, highlight=False, soft_wrap=soft_wrap)


def stdout() -> Console:
    # Built per call: rich then writes to whatever sys.stdout is now (click's test runner swaps it).
    return console()


def stderr() -> Console:
    # soft_wrap: a refusal's `fix` is often a command to copy; never break it at the terminal width.
    return console(err=True, soft_wrap=True)


def styled(value: object, style: str = "") -> Text:
    """A value as plain text (never markup, whatever brackets it holds; control characters
    ``visible``), in the CLI's own ``style``."""
    return Text(visible(value), style=style)


def emit_json(document: Any) -> None:
    """Print exactly one JSON document on stdout."""
    click.echo(json_text(document, indent=2))


def json_text(document: Any, *, indent: int | None = None) -> str:
    """``document`` as JSON text with no control character left raw: ``json.dumps`` escapes C0
    (``\\u001b``) but leaves DEL and C1 (``\\u009b``, a CSI to some terminals) as they are."""
    text = json.dumps(document, indent=indent, ensure_ascii=False, default=str)
    return _C1_ESCAPES.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def print_refusal(error: WorkhorseError, *, as_json: bool) -> None:
    """``error CODE: cause`` and ``fix: ...`` on stderr; with ``--json`` the error object on stdout."""
    if as_json:
        emit_json({"error": error.to_dict()})
        return
    console = stderr()
    console.print(Text.assemble(("error ", "bold red"), (error.code, "bold red"), ": ", visible(error.cause)))
    console.print(Text.assemble(("fix: ", "bold"), visible(error.fix)))


def state_text(state: str) -> Text:
    return styled(state, STATE_STYLES.get(state, ""))


def span(seconds: float) -> str:
    """A compact length of time: ``12s``, ``3m``, ``2h``, ``4d``."""
    seconds = abs(seconds)
    for size, unit in _UNITS:
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return "0s"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """``3m ago`` for the past, ``in 5m`` for the future, ``now`` within a second."""
    if when is None:
        return "-"
    delta = (when - (now or datetime.now(UTC))).total_seconds()  # clock-ok: display only
    if abs(delta) < 1:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def count(number: int, noun: str) -> str:
    """``1 job``, ``1,000 jobs``: a number with thousands separators and its noun, plural when due."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def percent(share: float | None) -> str:
    """``12.5%`` for a share from 0 to 1; ``-`` when there is none (nothing to divide)."""
    return "-" if share is None else f"{share * 100:.1f}%"


def progress_line(progress: dict[str, Any] | None, width: int | None = None) -> str:
    """A job's last progress report in a line: ``40/100 resizing`` or ``42% copying``; ``-`` when
    it never reported. ``width`` trims the whole line."""
    if not progress:
        return "-"
    done, total, fraction = progress.get("done"), progress.get("total"), progress.get("fraction")
    if done is not None and total is not None:
        amount = f"{done:,}/{total:,}"
    elif isinstance(fraction, int | float):
        amount = f"{fraction * 100:.0f}%"
    else:
        amount = ""
    message = progress.get("message")
    text = " ".join(part for part in (amount, str(message) if message else "") if part) or "-"
    return text if width is None else trim(text, width)


def trim(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def redact(url: str) -> str:
    """A database URL with its password hidden, for logs and human output."""
    return _PASSWORD.sub(r"\g<head>***@", url)
