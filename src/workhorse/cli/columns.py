"""Tables that fit the terminal: key columns whole, the rest by priority, and a line saying what
was left out.

Design: docs/reference/cli.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rich.cells import cell_len
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from workhorse.logs import visible

GAP = 2  # a table without a box puts one space of padding each side of a cell


@dataclass
class Column:
    header: str
    cells: Sequence[RenderableType] = field(default_factory=list)
    key: bool = False
    priority: int = 0
    justify: str = "left"  # "left" or "right"
    shrinks: int | None = None  # may be cut (ellipsis) to as little as this; takes what is left
    most: int | None = None  # never wider than this, whatever is left
    compact: str | None = None  # a narrower header ("oldest\nready"), used only when it lets more fit

    def __post_init__(self) -> None:
        # A cell from the database shows its control characters (cli.output.visible) before its
        # width is measured or cut: a cut never leaves half an escape sequence to swallow the rest.
        self.cells = [visible(cell) if isinstance(cell, str) else cell for cell in self.cells]

    def natural(self) -> int:
        """The width this column needs to show its header and every cell whole."""
        widest = max((_width(cell) for cell in self.cells), default=0)
        return max(widest, *(cell_len(line) for line in self.header.split("\n")))

    def least(self) -> int:
        return min(self.shrinks, self.natural()) if self.shrinks is not None else self.natural()


def fit(columns: Sequence[Column], width: int) -> tuple[Table, list[str]]:
    """The table of ``columns`` (in their order) that fits ``width``, and the headers left out.
    When some are left out (or the key columns alone overflow), the ``compact`` headers are tried
    too: the table that leaves less out wins."""
    table, hidden, over = _fit(columns, width)
    if (hidden or over) and any(c.compact for c in columns):
        narrow = [replace(c, header=c.compact) if c.compact else c for c in columns]
        second, left_out, still_over = _fit(narrow, width)
        if (still_over, len(left_out)) < (over, len(hidden)):
            table, hidden = second, left_out
    return table, [columns[i].header for i in hidden]


def _fit(columns: Sequence[Column], width: int) -> tuple[Table, list[int], int]:
    """The table, the positions of the columns left out, and by how much the key columns alone
    overflow ``width``."""
    chosen = {i for i, c in enumerate(columns) if c.key}
    grown: dict[int, int] = {}  # shrinking columns given their whole width (up to `most`) already
    used = sum(columns[i].natural() for i in chosen) + GAP * (len(chosen) - 1)
    over = max(used - width, 0)
    for i in sorted((i for i, c in enumerate(columns) if not c.key), key=lambda i: columns[i].priority):
        column, gap = columns[i], GAP if chosen else 0
        whole = min(column.natural(), column.most or column.natural())
        # a shrinking column takes its whole width before a less important one is added, if it can
        for need in (whole, column.least()) if column.shrinks is not None else (column.natural(),):
            if used + need + gap <= width:
                chosen.add(i)
                used += need + gap
                if need == whole:
                    grown[i] = whole
                break
    shown = [c for i, c in enumerate(columns) if i in chosen]
    spare = max(width - used, 0)
    widths: dict[int, int] = {id(columns[i]): w for i, w in grown.items()}
    for i in sorted(chosen - set(grown), key=lambda i: columns[i].priority):  # what is left widens the rest
        column = columns[i]
        if column.shrinks is not None:
            wide = min(column.natural(), column.least() + spare)
            if column.most is not None:
                wide = max(min(wide, column.most), column.least())
            spare -= wide - column.least()
            widths[id(column)] = max(wide, 1)
    squeezed = over > 0  # the key columns alone are wider: rich folds them rather than cut them
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in shown:
        if id(column) in widths:
            table.add_column(column.header, width=widths[id(column)], no_wrap=True, overflow="ellipsis")
        elif column.justify == "right":
            table.add_column(column.header, no_wrap=True, min_width=column.natural(), justify="right")
        elif squeezed:
            table.add_column(column.header, overflow="fold")
        else:
            table.add_column(column.header, no_wrap=True, min_width=column.natural())
    for row in range(max((len(c.cells) for c in shown), default=0)):
        table.add_row(*(c.cells[row] if row < len(c.cells) else "" for c in shown))
    return table, [i for i in range(len(columns)) if i not in chosen], over


def hidden_note(hidden: list[str], width: int | None = None) -> Text | None:
    """The one line saying which columns did not fit (named when the line has room for them in
    ``width``), or None when all did."""
    if not hidden:
        return None
    count = f"{len(hidden)} column{'s' if len(hidden) > 1 else ''} hidden"
    line = f"{count} ({', '.join(hidden)}): widen the terminal or use --json"
    if width is not None and cell_len(line) > width:
        line = f"{count}: widen the terminal or use --json"
    return Text(line, style="dim")


def _width(cell: RenderableType) -> int:
    if isinstance(cell, Text):
        return max((line.cell_len for line in cell.split("\n")), default=0)
    if isinstance(cell, str):
        return max((cell_len(line) for line in cell.split("\n")), default=0)
    return 0
