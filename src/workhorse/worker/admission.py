"""The admission step: between a claim's answer and the start of its runs.

Every claimed job passes through ``Admission.admit`` before the worker holds it. Today every job
is admitted (``AdmitAll``); flow control (fleet-wide and keyed concurrency, tenant fairness,
rate limits) plugs in here, deciding per claimed batch which runs start now.
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
