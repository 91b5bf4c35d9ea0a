"""What workhorse reads from Django's settings: ``settings.WORKHORSE`` and a ``DATABASES`` alias.

Design: docs/guides/django.md
"""

from __future__ import annotations

from typing import Any

from workhorse.errors import ConfigurationError

SETTING = "WORKHORSE"
LEGACY_APP_SETTING = "WORKHORSE_APP"
DEFAULT_ALIAS = "default"
DEFAULT_SCHEMA = "workhorse"
# Keys of settings.WORKHORSE handed to App(...) as they are, by their lower-case name.
APP_OPTIONS = ("MAX_PAYLOAD_BYTES", "LIMITS", "RETENTION", "WEBHOOKS")
KNOWN = ("DATABASE", "SCHEMA", "APP", "TASK_MODULES", *APP_OPTIONS)


def workhorse_settings() -> dict[str, Any]:
    """``settings.WORKHORSE`` checked: a dict of known keys (an empty one when it is not set)."""
    from django.conf import settings

    found = getattr(settings, SETTING, None)
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise ConfigurationError(
            cause=f"settings.{SETTING} expected a dict, got {type(found).__name__}",
            fix=f"{SETTING} = {{'DATABASE': 'default', 'SCHEMA': 'workhorse'}}   # in settings.py",
        )
    unknown = sorted(str(key) for key in found if key not in KNOWN)
    if unknown:
        raise ConfigurationError(
            cause=f"settings.{SETTING} has unknown keys {', '.join(unknown)}; it takes {', '.join(KNOWN)}",
            fix=f"remove or rename them: {SETTING} = {{'DATABASE': 'default', 'SCHEMA': 'workhorse'}}",
        )
    return dict(found)


def database_alias() -> str:
    alias = workhorse_settings().get("DATABASE", DEFAULT_ALIAS)
    if not isinstance(alias, str) or not alias:
        raise ConfigurationError(
            cause=f"settings.{SETTING}['DATABASE'] expected a DATABASES alias, got {alias!r}",
            fix=f"{SETTING} = {{'DATABASE': 'default'}}",
        )
    return alias


def schema_name() -> str:
    schema = workhorse_settings().get("SCHEMA", DEFAULT_SCHEMA)
    if not isinstance(schema, str):
        raise ConfigurationError(
            cause=f"settings.{SETTING}['SCHEMA'] expected a schema name, got {schema!r}",
            fix=f"{SETTING} = {{'SCHEMA': 'workhorse'}}",
        )
    return schema


def app_options() -> dict[str, Any]:
    """The ``App(...)`` keyword options ``settings.WORKHORSE`` sets (``LIMITS`` as ``limits=``...)."""
    config = workhorse_settings()
    return {key.lower(): config[key] for key in APP_OPTIONS if key in config}


def app_spec_setting() -> str | None:
    """``WORKHORSE['APP']`` (or the older ``settings.WORKHORSE_APP``): the project's own App, if any."""
    from django.conf import settings

    spec = workhorse_settings().get("APP", getattr(settings, LEGACY_APP_SETTING, None))
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise ConfigurationError(
            cause=f"settings.{SETTING}['APP'] expected 'module:attribute', got {spec!r}",
            fix=f"{SETTING} = {{'APP': 'myproject.jobs:app'}}   # or leave it out: one is built from settings",
        )
    return spec


def task_modules() -> list[str]:
    modules = workhorse_settings().get("TASK_MODULES", [])
    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        raise ConfigurationError(
            cause=f"settings.{SETTING}['TASK_MODULES'] expected a list of module paths, got {modules!r}",
            fix=f"{SETTING} = {{'TASK_MODULES': ['myproject.more_tasks']}}",
        )
    return list(modules)


def postgres_wrapper(alias: str) -> Any:
    """Django's connection wrapper of ``alias``, refused unless it is PostgreSQL."""
    from django.db import connections

    if alias not in connections.settings:
        known = ", ".join(sorted(connections.settings)) or "none"
        raise ConfigurationError(
            code="DATABASE_ALIAS_UNKNOWN",
            cause=f"settings.{SETTING} names the database alias {alias!r}, which DATABASES does not have "
            f"(it has: {known})",
            fix=f"{SETTING} = {{'DATABASE': 'default'}}   # one of the DATABASES keys",
        )
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            code="CONN_INVALID",
            cause=f"the DATABASES alias {alias!r} is on the {wrapper.vendor} backend; workhorse runs on PostgreSQL",
            fix="ENGINE 'django.db.backends.postgresql' (Django 4.2 or later, which uses psycopg 3)",
        )
    return wrapper


# What Django's connection parameters carry for psycopg alone: no libpq keyword, so no conninfo key.
PSYCOPG_ONLY = frozenset({"cursor_factory", "context", "prepare_threshold", "row_factory", "autocommit"})


def conninfo_for(alias: str) -> str:
    """A libpq connection string for the DATABASES alias: the parameters Django connects with
    (``NAME``, ``USER``, ``PASSWORD``, ``HOST``, ``PORT``, the libpq keys of ``OPTIONS``), less
    those only Django's own psycopg connection understands (its cursor class, adapters)."""
    params = postgres_wrapper(alias).get_connection_params()
    parts = []
    for key, value in params.items():
        if key in PSYCOPG_ONLY or value is None or value == "" or isinstance(value, bool):
            continue
        if not isinstance(value, str | int):
            continue  # an object for psycopg (a pool's options...), not a libpq setting
        parts.append(f"{key}={_quoted(str(value))}")
    return " ".join(parts)


def _quoted(value: str) -> str:
    """A conninfo value: single-quoted, with backslash and quote escaped (libpq's rule)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
