"""workhorse in a Django project (PostgreSQL backend, psycopg 3).

Add ``"workhorse.contrib.django"`` to ``INSTALLED_APPS`` and name your app in settings::

    WORKHORSE_APP = "myproject.jobs:app"

- Enqueue inside Django's transaction: ``job.enqueue_sync(payload, conn=django.db.connection)``
  within ``transaction.atomic()``; the job exists if and only if the block commits
  (``workhorse.connections`` unwraps the connection).
- ``python manage.py workhorse_worker [--queues a,b] [--concurrency N] [--burst] ...`` runs the
  worker with Django set up (every option of ``workhorse worker``).
- Django closes a request's stale connections around each request; a worker has no requests, so
  ``close_old_connections(app)`` (called by the command) wraps every plain ``def`` body of the app to
  call ``django.db.close_old_connections()`` before and after it, on the body's own thread (Django's
  connections are per thread). An ``async def`` body reaching the ORM goes through
  ``sync_to_async``, whose thread Django manages itself.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from workhorse.errors import ConfigurationError

if TYPE_CHECKING:
    from workhorse.app import App

SETTING = "WORKHORSE_APP"
_WRAPPED = "__workhorse_django_closing__"


def app_spec() -> str:
    """``settings.WORKHORSE_APP``: the ``module:attribute`` of the project's App."""
    from django.conf import settings

    spec = getattr(settings, SETTING, None)
    if not isinstance(spec, str) or not spec:
        raise ConfigurationError(
            code="APP_REQUIRED",
            cause=f"settings.{SETTING} is not set, so the worker does not know which App declares your jobs",
            fix=f"{SETTING} = 'myproject.jobs:app'   # in settings.py",
        )
    return spec


def close_old_connections(app: App) -> None:
    """Wrap each plain ``def`` body of ``app`` in ``django.db.close_old_connections()`` (before and
    after the body, on its thread). Safe to call twice."""
    for handle in app.jobs.values():
        fn = handle.fn
        if handle.is_async or getattr(fn, _WRAPPED, False):
            continue
        handle.fn = _closing(fn)


def _closing(fn: Any) -> Any:
    from django.db import close_old_connections as close

    @functools.wraps(fn)
    def body(ctx: Any, payload: Any) -> Any:
        close()
        try:
            return fn(ctx, payload)
        finally:
            close()

    setattr(body, _WRAPPED, True)
    return body
