"""What database health answers: tables, horizon holders, and the warnings ``judge`` draws from them.

Design: docs/guides/vacuum.md
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

DEAD_ROWS_BASE = 10_000  # a table is past its threshold with more dead rows than this ...
DEAD_ROWS_SHARE = 0.05  # ... plus this share of its live rows
PINNED_AFTER = 300.0  # seconds a transaction may hold the horizon before it is named
STALE_AFTER = 300.0  # seconds past its threshold without a vacuum before DEAD_ROWS_HIGH
SLOT_AGE = 1_000_000  # transactions a replication slot's xmin may lag before it is named


def threshold(live: int, *, base: int = DEAD_ROWS_BASE, share: float = DEAD_ROWS_SHARE) -> int:
    """Dead rows past which a table wants a vacuum: ``base`` plus ``share`` of its live rows."""
    return base + int(share * max(live, 0))


@dataclass(frozen=True)
class TableHealth:
    """One table of the schema: the collector's live and dead rows, seconds since its last vacuum
    (None: never), and whether it is past its threshold."""

    table: str
    live: int
    dead: int
    vacuumed_ago: float | None
    threshold: int

    @property
    def past(self) -> bool:
        return self.dead > self.threshold

    def to_dict(self) -> dict[str, Any]:
        ago = None if self.vacuumed_ago is None else round(self.vacuumed_ago, 3)
        return {
            "table": self.table,
            "live": self.live,
            "dead": self.dead,
            "threshold": self.threshold,
            "vacuumed_ago": ago,
        }


@dataclass(frozen=True)
class HorizonHolder:
    """What holds the vacuum horizon back: a ``session`` (its ``pid``), a ``prepared`` transaction
    or a replication ``slot`` (both by ``name``). ``age`` in seconds (None for a slot)."""

    kind: str
    pid: int | None
    state: str
    holder: str
    age: float | None
    query_start: datetime | None
    query: str | None
    name: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pid": self.pid,
            "state": self.state,
            "holder": self.holder,
            "age": None if self.age is None else round(self.age, 3),
            "query_start": None if self.query_start is None else self.query_start.isoformat(),
            "query": self.query,
            "name": self.name,
        }


@dataclass(frozen=True)
class HealthWarning:
    """One thing wrong, as an error would say it: a stable ``code``, the ``cause``, the ``fix``;
    ``subject`` names what it is about (a table, a pid, a slot)."""

    code: str
    subject: str
    cause: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "subject": self.subject, "cause": self.cause, "fix": self.fix}


@dataclass(frozen=True)
class HealthReport:
    """What ``app.admin.health()`` answers."""

    schema: str
    autovacuum: bool
    tables: list[TableHealth]
    holders: list[HorizonHolder]
    warnings: list[HealthWarning] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "autovacuum": self.autovacuum,
            "warnings": [w.to_dict() for w in self.warnings],
            "tables": [t.to_dict() for t in self.tables],
            "horizon": [h.to_dict() for h in self.holders],
        }


@runtime_checkable
class HealthRole(Protocol):
    """The optional health role of a driver (PostgreSQL's; the memory driver has no such thing)."""

    schema: str

    async def table_health(self) -> tuple[bool, list[tuple[str, int, int, float | None]]]:
        """Whether autovacuum is on, and each table of the schema: name, live, dead rows and
        seconds since its last vacuum (None: never), most dead rows first."""

    async def horizon_holders(self, after: float, slot_age: int = SLOT_AGE) -> list[HorizonHolder]:
        """What has held this database's vacuum horizon for longer than ``after`` seconds."""

    async def vacuum_table(self, table: str, limit: float) -> float:
        """``VACUUM (SKIP_LOCKED, ANALYZE)`` one table of the schema, on a connection of its own,
        for at most ``limit`` seconds; answers the seconds it took."""


def judge(
    schema: str,
    autovacuum: bool,
    tables: list[TableHealth],
    holders: list[HorizonHolder],
    *,
    stale_after: float = STALE_AFTER,
) -> list[HealthWarning]:
    """The warnings: one VACUUM_HORIZON_PINNED per holder, one DEAD_ROWS_HIGH per table past its
    threshold that nothing vacuumed in the last ``stale_after`` seconds."""
    warnings = [_pinned(h) for h in holders]
    for t in tables:
        if not t.past or (t.vacuumed_ago is not None and t.vacuumed_ago < stale_after):
            continue
        when = "never vacuumed" if t.vacuumed_ago is None else f"last vacuumed {_span(t.vacuumed_ago)} ago"
        why = "autovacuum is off" if not autovacuum else "autovacuum is not keeping up"
        warnings.append(
            HealthWarning(
                code="DEAD_ROWS_HIGH",
                subject=f"{schema}.{t.table}",
                cause=f"{schema}.{t.table} holds {t.dead:,} dead rows ({t.live:,} live; its threshold is "
                f"{t.threshold:,}) and was {when}; {why}, and every claim walks past dead rows until a vacuum "
                "removes them",
                fix=f"VACUUM (ANALYZE) {schema}.{t.table};   -- then turn autovacuum on, or run a scheduler "
                "with WORKHORSE_VACUUM=on (the default) so its leader vacuums past the threshold",
            )
        )
    return warnings


def _pinned(h: HorizonHolder) -> HealthWarning:
    if h.kind == "prepared":
        return HealthWarning(
            code="VACUUM_HORIZON_PINNED",
            subject=f"prepared {h.name}",
            cause=f"the prepared transaction {h.name!r} (owner {h.holder}) has been open for {_span(h.age or 0)}: "
            "no vacuum can remove a row that died after it began",
            fix=f"COMMIT PREPARED '{h.name}';   -- or: ROLLBACK PREPARED '{h.name}';",
        )
    if h.kind == "slot":
        return HealthWarning(
            code="VACUUM_HORIZON_PINNED",
            subject=f"slot {h.name}",
            cause=f"the {h.holder} replication slot {h.name!r} ({h.state}) holds an old xmin: no vacuum can "
            "remove a row that died after it",
            fix=f"SELECT pg_drop_replication_slot('{h.name}');   -- if nothing consumes it any more",
        )
    started = "" if h.query_start is None else f", its last query started {h.query_start.isoformat()}"
    query = "" if not h.query else f" ({' '.join(h.query.split())[:120]!r})"
    verb = "pg_terminate_backend" if h.state.startswith("idle") else "pg_cancel_backend"
    return HealthWarning(
        code="VACUUM_HORIZON_PINNED",
        subject=f"pid {h.pid}",
        cause=f"session pid {h.pid} ({h.holder}, {h.state}) has held a transaction open for {_span(h.age or 0)}"
        f"{started}{query}: no vacuum can remove a row that died after it began, so dead rows pile up",
        fix=f"SELECT {verb}({h.pid});   -- or pg_terminate_backend({h.pid}); then end long transactions in "
        "that client, or set idle_in_transaction_session_timeout",
    )


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


async def read_health(
    driver: HealthRole,
    *,
    base: int = DEAD_ROWS_BASE,
    share: float = DEAD_ROWS_SHARE,
    pinned_after: float = PINNED_AFTER,
    stale_after: float = STALE_AFTER,
) -> HealthReport:
    """Two statements: the tables and the horizon's holders, judged."""
    autovacuum, rows = await driver.table_health()
    tables = [TableHealth(n, live, dead, ago, threshold(live, base=base, share=share)) for n, live, dead, ago in rows]
    holders = await driver.horizon_holders(pinned_after)
    warnings = judge(driver.schema, autovacuum, tables, holders, stale_after=stale_after)
    return HealthReport(driver.schema, autovacuum, tables, holders, warnings)
