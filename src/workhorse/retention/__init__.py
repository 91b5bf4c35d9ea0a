"""Retention, one folder: how long what only grows is kept, and the purge that removes the rest
(run by the fleet's leader, ``leader/purge.py``, or by ``workhorse purge`` now).

    policy    Retention (``App(retention=...)``), DEFAULT_RETENTION, PurgeReport, and the policy a
              driver's purge is given
    postgres  PostgresRetention: the PostgreSQL driver's part, a small batch per statement
    queries   the purge's statements, by target
"""

from workhorse.retention.policy import DEFAULT_RETENTION, PurgeReport, Retention, purge_policy

__all__ = ["DEFAULT_RETENTION", "PurgeReport", "Retention", "purge_policy"]
