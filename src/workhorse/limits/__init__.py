"""Flow control, one folder: fleet-wide caps on running jobs and a sliding-window start rate, all
enforced by the statement that claims jobs.

Design: docs/guides/flow-control.md
"""

from workhorse.limits.rules import Concurrency, Limits, Rate

__all__ = ["Concurrency", "Limits", "Rate"]
