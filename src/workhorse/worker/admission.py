"""The admission step: between a claim's answer and the start of its runs.

Every claimed job passes through ``Admission.admit`` before the worker holds it. Today every job
is admitted (``AdmitAll``); flow control (fleet-wide and keyed concurrency, tenant fairness,
rate limits) plugs in here, deciding per claimed batch which runs start now. A job left out is
not held: its lease lapses and a later claim takes it, spending an attempt, so a step that
refuses must also hand the job back, and wake the claim loop only when a slot frees (handing it
back alone would have the next claim take it again at once). None does yet.
"""

from __future__ import annotations

from typing import Protocol

from workhorse.drivers.base import Claimed


class Admission(Protocol):
    def admit(self, claimed: list[Claimed]) -> list[Claimed]:
        """The claimed jobs that may be held and started now, in the order given."""
        ...


class AdmitAll:
    """Admits every claimed job: the worker's limits are its slots and nothing else."""

    def admit(self, claimed: list[Claimed]) -> list[Claimed]:
        return claimed
