"""Flow control, one folder: fleet-wide caps on running jobs and a sliding-window start rate, all
enforced by the statement that claims jobs.

    rules    Concurrency, Limits, Rate as declared (screened at construction) and the FlowRules a
             worker hands its driver's claim; why a ready job is held (``why_held``)
    queries  the flow claim and the statements beside it (slots, the rate window, held reasons)
"""

from workhorse.limits.rules import Concurrency, Limits, Rate

__all__ = ["Concurrency", "Limits", "Rate"]
