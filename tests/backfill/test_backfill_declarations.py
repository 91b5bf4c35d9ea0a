"""Declarations refused before anything runs, the checksum, the environment, and the context's
drain hand-back outside a drain. No database."""

from __future__ import annotations

from typing import Any

import pytest

from workhorse import App
from workhorse.backfill import JOB_NAME, AppMigration, Batch, environment, registry
from workhorse.errors import ConfigurationError, WorkhorseError


async def noop(conn: Any, cursor: Any, limit: int) -> None:
    return None


async def other(conn: Any, cursor: Any, limit: int) -> None:
    return None


def sync_fn(conn: Any, cursor: Any, limit: int) -> None:
    return None


async def count(conn: Any) -> int:
    return 0


def _refused(options: dict[str, Any], fn: Any = noop, name: str = "ok") -> ConfigurationError:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError) as info:
        app.backfill(name, **options)(fn)
    assert info.value.code == "BACKFILL_INVALID" and info.value.cause and info.value.fix
    assert registry(app) == {} and JOB_NAME not in app.jobs  # nothing declared
    return info.value


@pytest.mark.parametrize(
    ("options", "fn", "name", "says"),
    [
        ({"tenant": "none"}, noop, "has space", "backfill name"),
        ({"tenant": "none"}, sync_fn, "ok", "async def"),
        ({"tenant": "acme"}, noop, "ok", "tenant expected 'none'"),
        ({"tenant": "none", "batch_size": 0}, noop, "ok", "batch_size"),
        ({"tenant": "none", "batch_size": True}, noop, "ok", "batch_size"),
        ({"tenant": "none", "environments": "production"}, noop, "ok", "environments"),
        ({"tenant": "none", "requires": "alembic:abc"}, noop, "ok", "requires"),
        ({"tenant": "none", "requires": 13}, noop, "ok", "requires"),
        ({"tenant": "none", "count": len}, noop, "ok", "count"),
        ({"tenant": "none", "rows_per_second": 0}, noop, "ok", "rows_per_second"),
        ({"tenant": "none", "rows_per_second": float("inf")}, noop, "ok", "rows_per_second"),
    ],
)
def test_a_bad_declaration_is_refused(options: dict[str, Any], fn: Any, name: str, says: str) -> None:
    assert says in _refused(options, fn, name).cause


def test_a_bad_pause_is_refused() -> None:
    with pytest.raises(WorkhorseError):
        App(driver="memory").backfill("ok", tenant="none", pause="soon")(noop)


def test_a_name_is_one_declaration() -> None:
    app = App(driver="memory")
    app.backfill("one", tenant="none")(noop)
    with pytest.raises(ConfigurationError) as info:
        app.backfill("one", tenant="none")(other)
    assert info.value.code == "BACKFILL_INVALID" and "two backfills" in info.value.cause


def test_the_first_declaration_registers_the_pass_job_once() -> None:
    app = App(driver="memory")
    first = app.backfill("one", tenant="none", environments=(), requires="workhorse:13")(noop)
    app.backfill("two", tenant="none", count=count)(other)
    assert set(registry(app)) == {"one", "two"} and app.jobs[JOB_NAME].tenant == "none"
    assert first.environments is None and first.allowed_in("anything")  # empty: every environment
    assert first.options()["requires"] == "workhorse:13"


def test_the_checksum_covers_name_options_and_code() -> None:
    def declared(name: str, fn: Any = noop, **options: Any) -> str:
        return str(App(driver="memory").backfill(name, tenant="none", **options)(fn).checksum)

    base = declared("a")
    assert declared("a") == base
    assert len({base, declared("b"), declared("a", batch_size=7), declared("a", fn=other)}) == 4
    assert declared("a", count=count) != base and declared("a", pause="1s") != base


def test_batch_and_app_migrations_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        Batch(1, rows=-1)
    with pytest.raises(ConfigurationError):
        AppMigration("drop table x; --", version="1")
    with pytest.raises(ConfigurationError):
        AppMigration("schema_migrations")
    assert str(AppMigration.django("shop", "0042_slug")) == "django_migrations(app=shop, name=0042_slug)"
    assert AppMigration.alembic("ae10").match == (("version_num", "ae10"),)


def test_the_environment_defaults_to_development(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKHORSE_ENV", raising=False)
    assert environment() == "development"
    monkeypatch.setenv("WORKHORSE_ENV", " ")
    assert environment() == "development"
    monkeypatch.setenv("WORKHORSE_ENV", "production")
    assert environment() == "production"


def test_a_cursor_that_is_not_json_is_refused() -> None:
    backfill = App(driver="memory").backfill("ok", tenant="none")(noop)
    assert backfill.step(Batch([1, "a"], rows=3)) == ([1, "a"], 3)
    assert backfill.step(7) == (7, None) and backfill.step(None) == (None, None)  # a bare cursor reports no rows
    with pytest.raises(WorkhorseError) as info:
        backfill.step(object())
    assert info.value.code == "BACKFILL_CURSOR_INVALID"


def test_hand_back_outside_a_drain_is_refused() -> None:
    from bfkit import context

    ctx = context("0190f1c2-7a3e-7b4c-9d2e-5f6a7b8c9d0e")
    assert ctx.draining is False
    with pytest.raises(ConfigurationError) as info:
        ctx.hand_back()
    assert info.value.code == "HAND_BACK_INVALID"
