"""Statements of the migration ledger."""

# Serialises concurrent migrators. Transaction-scoped, on the migrator's own dedicated connection.
LOCK = "select pg_advisory_xact_lock(hashtext('workhorse:migrate:' || %(schema)s))"

CREATE_SCHEMA = "create schema if not exists {schema}"

CREATE_LEDGER = """
create table if not exists {schema}.migrations (
    version    integer     primary key,
    name       text        not null,
    applied_at timestamptz not null default now()
)
"""

APPLIED = "select version from {schema}.migrations order by version"

RECORD = "insert into {schema}.migrations (version, name) values (%(version)s, %(name)s)"

# to_regclass answers null instead of raising when the ledger does not exist yet.
LEDGER_EXISTS = "select to_regclass(%(ledger)s) is not null as present"

CURRENT_VERSION = "select coalesce(max(version), 0) as version from {schema}.migrations"

# The DBA script (`workhorse migrate --sql`) records each file with literal values.
RECORD_LITERAL = "insert into {schema}.migrations (version, name) values ({version}, '{name}') on conflict do nothing;"
