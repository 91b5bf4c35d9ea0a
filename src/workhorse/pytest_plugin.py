"""The pytest plugin of workhorse (entry point ``workhorse``, loaded when workhorse is installed).

Design: docs/guides/testing.md
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from workhorse.app import App
    from workhorse.testing import Clock

INI = "workhorse_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI, "module:attribute of the App the workhorse fixtures `app` and `pg_app` switch (optional)")


_RUNNING_AT_START = pytest.StashKey[bool]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if _embedded_in_use(session.config):
        from workhorse import embedded
        from workhorse.errors import WorkhorseError

        with contextlib.suppress(WorkhorseError):  # no server user (root): nothing could start one
            session.config.stash[_RUNNING_AT_START] = bool(embedded.status()["running"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the embedded server this session started: a test run leaves no server behind."""
    if _embedded_in_use(session.config) and session.config.stash.get(_RUNNING_AT_START, True) is False:
        from workhorse import embedded

        embedded.stop()


def _embedded_in_use(config: pytest.Config) -> bool:
    """Whether a session may fall back to the embedded server, and this process is the one that
    sees the session whole (not a pytest-xdist worker, whose siblings may still use the server)."""
    import os

    from workhorse.embedded import ENV_URL

    return not os.environ.get(ENV_URL) and not hasattr(config, "workerinput")


@pytest.fixture
def workhorse_app(request: pytest.FixtureRequest) -> App | None:
    """Your App, named by the ``workhorse_app`` ini option; None: the fixtures build a fresh one."""
    spec = request.config.getini(INI)
    if not spec:
        return None
    from workhorse.cli.main import load_app

    return load_app(str(spec))


@pytest.fixture
def workhorse_clock(app: App) -> Clock:
    from workhorse.testing import clock_of

    return clock_of(app)


# The Apps a test may let reach a database while the `app` fixture guards it (pg_app adds its own).
_ALLOWED: set[App] = set()


@pytest.fixture
def app(workhorse_app: App | None) -> Iterator[App]:
    """An App on the memory driver. While the test runs, any other App that would reach a real
    database (a job handle of your module's App, when ``workhorse_app`` is not set) is refused with
    ``TEST_APP_UNBOUND``, saying how to name it (``workhorse.testing.database_guard``)."""
    from workhorse.app import App
    from workhorse.testing import database_guard, memory

    target = workhorse_app if workhorse_app is not None else App(driver="memory")
    with memory(target), database_guard(_ALLOWED):
        yield target


@pytest.fixture
def pg_app(workhorse_app: App | None) -> Iterator[App]:
    from workhorse.app import App
    from workhorse.drivers.direct import drop_schema
    from workhorse.embedded import resolve_database_url

    url = resolve_database_url(None)  # WORKHORSE_DATABASE_URL, else the embedded server
    schema = f"wh_test_{uuid.uuid4().hex[:12]}"
    target = workhorse_app if workhorse_app is not None else App(url, schema=schema)
    saved = _point(target, url, schema)
    _ALLOWED.add(target)
    try:
        target.migrate_sync()
        yield target
    finally:
        _ALLOWED.discard(target)
        _restore(target, saved)
        drop_schema(url, schema)


_STATE = ("_url", "schema", "_memory", "_given", "_drivers", "_sync_driver")


def _point(app: App, url: str, schema: str) -> dict[str, Any]:
    """Point ``app`` at ``url``/``schema`` for the test; answers what to put back."""
    saved = {name: getattr(app, name) for name in _STATE}
    app._url, app.schema, app._memory, app._given, app._drivers, app._sync_driver = url, schema, None, None, {}, None
    return saved


def _restore(app: App, saved: dict[str, Any]) -> None:
    """Close the test's connections (now, synchronously: their event loops may have ended) and put
    the app back."""
    for _ref, driver in app._drivers.values():
        driver.abandon()
    if app._sync_driver is not None:
        app._sync_driver.abandon()
    for name, value in saved.items():
        setattr(app, name, value)
