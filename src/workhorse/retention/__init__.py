"""Retention, one folder: how long what only grows is kept, and the purge that removes the rest
(run by the fleet's leader, ``leader/purge.py``, or by ``workhorse purge`` now).

Design: docs/guides/retention.md
"""

from workhorse.retention.policy import DEFAULT_RETENTION, PurgeReport, Retention, purge_policy

__all__ = ["DEFAULT_RETENTION", "PurgeReport", "Retention", "purge_policy"]
