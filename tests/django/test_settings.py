"""Settings, not URLs: the App connects through a DATABASES alias, takes its options from
settings.WORKHORSE, and an enqueue without conn= inside transaction.atomic() joins the block."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from workhorse.errors import ConfigurationError


def count(url: str, schema: str) -> int:
    with psycopg.connect(url) as conn:
        query = f"select count(*) from {schema}.jobs where name = 'settings.joined'"
        row = conn.execute(query).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return int(row[0])


@pytest.fixture
def djapp(site: dict[str, str]) -> Any:
    from workhorse.contrib.django import DjangoApp

    app = DjangoApp()
    app.migrate_sync()
    return app


def test_the_app_connects_by_the_alias_and_takes_its_schema_from_settings(site: dict[str, str], djapp: Any) -> None:
    from workhorse.contrib.django.settings import conninfo_for

    assert djapp.schema == site["WHDJ_SCHEMA"] and djapp.database_alias == "default"
    with psycopg.connect(conninfo_for("default")) as conn:
        row = conn.execute("select current_database()").fetchone()
    assert row == (site["WHDJ_NAME"],)
    assert "'" in djapp.database_url and "postgresql://" not in djapp.database_url


def test_an_enqueue_inside_atomic_is_kept_on_commit_and_dropped_on_rollback(site: dict[str, str], djapp: Any) -> None:
    from django.db import transaction

    job = djapp.job(name="settings.joined", tenant="none")(lambda ctx, payload: None)
    schema, url = djapp.schema, site["URL"]
    with transaction.atomic():
        job.enqueue_sync({"n": 1})
        assert count(url, schema) == 0  # written on Django's connection, not committed yet
    assert count(url, schema) == 1
    try:
        with transaction.atomic():
            job.enqueue_sync({"n": 2})
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    with transaction.atomic():
        with transaction.atomic():  # a savepoint rolled back alone
            job.enqueue_sync({"n": 3})
            transaction.set_rollback(True)
        job.enqueue_sync({"n": 4})
    job.enqueue_sync({"n": 5})  # autocommit: on workhorse's own connection, at once
    with psycopg.connect(url) as conn:
        query = f"select payload->>'n' from {schema}.jobs where name = 'settings.joined' order by 1"
        rows = conn.execute(query).fetchall()  # type: ignore[arg-type]
    assert [r[0] for r in rows] == ["1", "4", "5"]


def test_settings_workhorse_options_reach_the_app(site: dict[str, str]) -> None:
    from django.test import override_settings

    from workhorse import Limits
    from workhorse.contrib.django import DjangoApp

    limits = Limits(per_tenant=3)
    with override_settings(WORKHORSE={"SCHEMA": "other_one", "LIMITS": limits, "MAX_PAYLOAD_BYTES": 999}):
        app = DjangoApp()
    assert (app.schema, app.limits, app.max_payload_bytes) == ("other_one", limits, 999)


@pytest.mark.parametrize(
    ("setting", "code", "said"),
    [
        ({"DATABASES": "default"}, "CONFIG_INVALID", "DATABASES"),
        ({"DATABASE": "replica"}, "DATABASE_ALIAS_UNKNOWN", "replica"),
        ({"SCHEMA": 5}, "CONFIG_INVALID", "SCHEMA"),
    ],
)
def test_a_wrong_setting_is_refused_naming_it(
    site: dict[str, str], setting: dict[str, Any], code: str, said: str
) -> None:
    from django.test import override_settings

    from workhorse.contrib.django import DjangoApp

    with override_settings(WORKHORSE=setting), pytest.raises(ConfigurationError) as caught:
        DjangoApp().database_url  # noqa: B018
    assert caught.value.code == code and said in caught.value.cause and caught.value.fix
