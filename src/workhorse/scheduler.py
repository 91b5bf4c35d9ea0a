"""``from workhorse.scheduler import Scheduler``, the import the docs show: the scheduler role lives
in the leader's folder (``workhorse.leader.scheduler``)."""

from workhorse.leader.scheduler import Scheduler

__all__ = ["Scheduler"]
