"""workhorse in a Django project (PostgreSQL backend, psycopg 3).

Design: docs/guides/django.md
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

from workhorse.contrib.django.settings import app_spec_setting
from workhorse.errors import ConfigurationError

if TYPE_CHECKING:
    from workhorse.app import App

SETTING = "WORKHORSE_APP"
_WRAPPED = "__workhorse_django_closing__"
_lock = threading.Lock()
_built: dict[str, App] = {}


def __getattr__(name: str) -> Any:
    if name == "DjangoApp":  # imported lazily: workhorse.app is not needed to read the settings
        from workhorse.contrib.django.app import DjangoApp

        return DjangoApp
    raise AttributeError(name)


def app_spec() -> str:
    """``settings.WORKHORSE['APP']`` (or ``settings.WORKHORSE_APP``): the project's App, as ``module:attribute``."""
    spec = app_spec_setting()
    if spec is None:
        raise ConfigurationError(
            code="APP_REQUIRED",
            cause="settings.WORKHORSE['APP'] is not set, so there is no App of your own to load",
            fix="WORKHORSE = {'APP': 'myproject.jobs:app'}   # in settings.py",
        )
    return spec


def get_app() -> App:
    """The project's App: ``settings.WORKHORSE['APP']`` when set, else one ``DjangoApp`` built from
    the settings (the same object for the life of the process)."""
    spec = app_spec_setting()
    if spec is not None:
        from workhorse.cli.main import load_app

        return load_app(spec)  # a module attribute: the same App every call
    with _lock:
        if "default" not in _built:
            from workhorse.contrib.django.app import DjangoApp

            _built["default"] = DjangoApp()
        return _built["default"]


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
