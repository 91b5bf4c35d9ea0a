"""Database health, one folder: the dead rows of the queue's tables and what pins the vacuum
horizon, judged into warnings with a code, a cause and a fix (``workhorse stats``, the dashboard,
the leader's log), and the vacuum the leader runs past a threshold (``leader/vacuum.py``).

Design: docs/guides/vacuum.md
"""

from workhorse.health.report import (
    HealthReport,
    HealthRole,
    HealthWarning,
    HorizonHolder,
    TableHealth,
    judge,
    read_health,
)

__all__ = ["HealthReport", "HealthRole", "HealthWarning", "HorizonHolder", "TableHealth", "judge", "read_health"]
