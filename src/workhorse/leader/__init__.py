"""The leader, one folder: the scheduler role and its election, cron tasks, the leader's duties, the rescue.
This face imports nothing (the driver's interface imports ``rounds``): import each name from its
module (``from workhorse.leader.scheduler import Scheduler``).

Design: docs/guides/cron.md, docs/how-it-works/architecture.md
"""
