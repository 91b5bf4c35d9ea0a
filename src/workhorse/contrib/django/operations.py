"""``ApplyWorkhorseMigration(N)``: the Django migration operation that applies workhorse's migration N.

``workhorse.contrib.django`` ships one Django migration per workhorse migration file
(``migrations/00NN_*.py``), so ``manage.py migrate`` installs and upgrades workhorse's schema and
``manage.py sqlmigrate workhorse 00NN`` prints the SQL. Each applies its file exactly as
``workhorse migrate`` would, and agrees with it in either order:

- under the same transaction-scoped advisory lock as ``workhorse migrate`` (held until Django
  commits the migration), so the two never apply a file at the same time;
- only when workhorse's own ledger (``{schema}.migrations``) does not already record version N,
  and recording it there when it applies it: a ``workhorse migrate`` afterwards finds nothing to
  do, and a Django migration after ``workhorse migrate`` changes nothing.

The schema is ``settings.WORKHORSE['SCHEMA']`` when the migration runs. The operation runs on the
DATABASES alias workhorse uses (``settings.WORKHORSE['DATABASE']``); ``migrate --database other``
leaves other databases alone. Forward only: there is no reverse (``migrate workhorse zero`` is
refused), as workhorse's own migrations have none.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from workhorse._db.migrate import Migration, available
from workhorse._db.queries import django as sql
from workhorse._db.queries import migrations as ledger_sql
from workhorse.contrib.django.settings import database_alias, schema_name
from workhorse.drivers.postgres_core import check_schema_name
from workhorse.errors import ConfigurationError


def migration_file(version: int) -> Migration:
    for found in available():
        if found.version == version:
            return found
    raise ConfigurationError(
        code="SCHEMA_VERSION_UNKNOWN",
        cause=f"a Django migration asks for workhorse migration {version}, which this workhorse does not ship",
        fix="install the workhorse version this project's migrations were made with (pip install -U workhorse)",
    )


def statements(version: int, schema: str) -> list[str]:
    """The SQL that applies workhorse migration ``version`` to ``schema`` once, in order."""
    schema = check_schema_name(schema)
    found = migration_file(version)
    text = found.statement(schema)
    tag = f"$workhorse_{version:03d}$"
    if tag in text or "$workhorse_guard$" in text:
        raise ConfigurationError(
            cause=f"workhorse migration {version:03d}_{found.name} contains the quoting tag {tag}",
            fix="rename the dollar-quote tag in that migration file",
        )
    return [
        sql.MIGRATE_LOCK.format(schema=schema),
        ledger_sql.CREATE_SCHEMA.format(schema=schema),
        ledger_sql.CREATE_LEDGER.format(schema=schema).strip(),
        sql.MIGRATE_ONCE.format(schema=schema, version=version, name=found.name, tag=tag, text=text),
    ]


class ApplyWorkhorseMigration(migrations.operations.base.Operation):  # type: ignore[misc]  # no hints
    """Apply workhorse's schema migration ``version`` (see the module)."""

    reversible = False
    reduces_to_sql = True
    atomic = True

    def __init__(self, version: int) -> None:
        self.version = version

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (f"{__name__}.{type(self).__qualname__}", [self.version], {})

    def describe(self) -> str:
        return f"Apply workhorse schema migration {self.version:03d}_{migration_file(self.version).name}"

    @property
    def migration_name_fragment(self) -> str:
        return f"workhorse_{self.version:03d}"

    def state_forwards(self, app_label: str, state: Any) -> None:
        return None  # the tables are workhorse's; Django's model state is untouched

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.alias != database_alias():
            return
        for statement in statements(self.version, schema_name()):
            schema_editor.execute(statement, params=None)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        raise ConfigurationError(
            code="SCHEMA_FORWARD_ONLY",
            cause=f"workhorse migration {self.version} has no reverse: workhorse's schema only moves forward",
            fix="migrate workhorse forward only; to remove it, drop its schema by hand (drop schema ... cascade)",
        )
