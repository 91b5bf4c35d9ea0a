"""``DjangoApp``: an App whose database is a ``DATABASES`` alias and whose options are ``settings.WORKHORSE``.

Design: docs/guides/django.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workhorse.app import App
from workhorse.contrib.django.settings import app_options, conninfo_for, database_alias, schema_name
from workhorse.drivers.pooler import pool_size
from workhorse.drivers.postgres import PostgresDriver
from workhorse.types import JobRef, NewJob


def atomic_connection(alias: str) -> Any:
    """Django's connection of ``alias`` when this thread is inside ``transaction.atomic()`` on it, else None."""
    from django.db import connections

    wrapper = connections[alias]
    return wrapper if wrapper.in_atomic_block else None


class JoiningDriver(PostgresDriver):
    """The PostgreSQL driver of a ``DjangoApp``: a sync enqueue without ``conn=`` joins the
    calling thread's open ``transaction.atomic()`` on the app's alias."""

    def __init__(self, url: str, *, alias: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.alias = alias

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        if conn is None:
            conn = atomic_connection(self.alias)
        return super().enqueue_many_sync(jobs, conn=conn)


class DjangoApp(App):
    """An ``App`` configured by Django's settings (see ``workhorse.contrib.django.settings``).
    ``alias`` and the keyword options override ``settings.WORKHORSE``."""

    def __init__(self, alias: str | None = None, *, schema: str | None = None, **options: Any) -> None:
        self.database_alias = alias or database_alias()
        super().__init__(None, schema=schema or schema_name(), **{**app_options(), **options})

    @property
    def database_url(self) -> str:
        if self._url is None:
            self._url = conninfo_for(self.database_alias)
        url: str = App.database_url.fget(self)  # type: ignore[attr-defined]  # the guard, as App's does
        return url

    def postgres_driver(self, role: str, *, max_size: int | None = None, generic_plans: bool = False) -> PostgresDriver:
        return JoiningDriver(
            self.database_url,
            alias=self.database_alias,
            schema=self.schema,
            role=role,
            max_size=pool_size() if max_size is None else max_size,
            generic_plans=generic_plans,
        )
