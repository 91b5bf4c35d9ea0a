"""Small charts as inline SVG, drawn on the server: no script, no CDN, nothing to load.

Only numbers go into the markup this module writes (every label a person reads is set by the
template, escaped), so its output is safe to mark as markup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup

MINUTES = 60  # the overview's charts: the last hour, one bar a minute


@dataclass(frozen=True)
class Minute:
    """One minute of one queue: attempts completed, and attempts that failed (retried, failed or dead)."""

    completed: int = 0
    failures: int = 0


def hour_of(
    buckets: Sequence[tuple[datetime, str, int, int]],
    queue: str,
    now: datetime,
    minutes: int = MINUTES,
) -> list[Minute]:
    """The last ``minutes`` minutes of ``queue``, oldest first, from (bucket, queue, completed,
    failures) rows; minutes without a row are zero."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes - 1)
    out = [Minute() for _ in range(minutes)]
    for bucket, name, completed, failures in buckets:
        if name != queue or bucket < start or bucket > end:
            continue
        i = int((bucket - start).total_seconds() // 60)
        was = out[i]
        out[i] = Minute(was.completed + completed, was.failures + failures)
    return out


def bars(minutes: Sequence[Minute], *, width: int = 180, height: int = 28) -> Markup:
    """A bar a minute: completed attempts (green) with failures stacked on them (red), scaled to
    the busiest minute. An hour with nothing settled draws a flat baseline."""
    count = max(len(minutes), 1)
    step = width / count
    peak = max((m.completed + m.failures for m in minutes), default=0)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-hidden="true" focusable="false">',
        f'<line class="chart-base" x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}"/>',
    ]
    if peak > 0:
        scale = (height - 2) / peak
        for i, m in enumerate(minutes):
            x = i * step + 0.5
            w = max(step - 1.0, 1.0)
            ok = m.completed * scale
            bad = m.failures * scale
            if ok > 0:
                parts.append(
                    f'<rect class="chart-ok" x="{x:.1f}" y="{height - ok:.1f}" width="{w:.1f}" height="{ok:.1f}"/>'
                )
            if bad > 0:
                y = height - ok - bad
                parts.append(f'<rect class="chart-bad" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{bad:.1f}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers only (see the module docstring)


def state_mix(counts: Sequence[tuple[str, int]], *, width: int = 120, height: int = 8) -> Markup:
    """One bar split by state (ready, running, ...), each part as wide as its share."""
    total = sum(n for _, n in counts)
    parts = [
        f'<svg class="mix" viewBox="0 0 {width} {height}" width="{width}" height="{height}" aria-hidden="true">',
        f'<rect class="mix-empty" x="0" y="0" width="{width}" height="{height}" rx="2"/>',
    ]
    if total:
        x = 0.0
        for state, n in counts:
            if n <= 0 or not state.isalpha():
                continue
            w = width * n / total
            parts.append(f'<rect class="mix-{state}" x="{x:.1f}" y="0" width="{w:.1f}" height="{height}"/>')
            x += w
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and known state names only
