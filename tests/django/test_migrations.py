"""Migrations by manage.py: Django's migrate installs workhorse's schema, sqlmigrate shows the SQL,
and `workhorse migrate` agrees with it whichever runs first."""

from __future__ import annotations

from pathlib import Path

import psycopg
from djsite import run

import workhorse
from workhorse._db.migrate import available, latest_version


def ledger(url: str, schema: str) -> list[tuple[int, object]]:
    with psycopg.connect(url) as conn:
        return conn.execute(f"select version, applied_at from {schema}.migrations order by 1").fetchall()  # type: ignore[arg-type]


def django_applied(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select name from django_migrations where app = 'workhorse' order by id").fetchall()
    return [r[0] for r in rows]


def workhorse_migrate(env: dict[str, str]) -> str:
    done = run(["-m", "workhorse", "--database-url", env["URL"], "--schema", env["WHDJ_SCHEMA"], "migrate"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_every_workhorse_migration_file_has_its_django_migration() -> None:
    folder = Path(workhorse.__file__).parent / "contrib" / "django" / "migrations"
    shipped = sorted(p.stem for p in folder.glob("0*.py"))
    assert shipped == [f"{m.version:04d}_{m.name}" for m in available()]


def test_manage_py_migrate_on_a_fresh_database_then_workhorse_migrate(fresh_site: dict[str, str]) -> None:
    done = run(["manage.py", "migrate", "-v", "0"], fresh_site)
    assert done.returncode == 0, done.stdout + done.stderr
    url, schema = fresh_site["URL"], fresh_site["WHDJ_SCHEMA"]
    before = ledger(url, schema)
    assert [v for v, _ in before] == list(range(1, latest_version() + 1))
    assert "is up to date" in workhorse_migrate(fresh_site)
    assert ledger(url, schema) == before
    check = run(["-m", "workhorse", "--database-url", url, "--schema", schema, "ls", "--json"], fresh_site)
    assert check.returncode == 0, check.stdout + check.stderr  # the schema is the version this code needs


def test_workhorse_migrate_first_then_manage_py_migrate_changes_nothing(fresh_site: dict[str, str]) -> None:
    workhorse_migrate(fresh_site)
    url, schema = fresh_site["URL"], fresh_site["WHDJ_SCHEMA"]
    before = ledger(url, schema)
    done = run(["manage.py", "migrate", "-v", "0"], fresh_site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ledger(url, schema) == before  # no file ran again: every version kept its applied_at
    assert len(django_applied(url)) == latest_version()


def test_interleaved_django_part_way_then_workhorse_then_django(fresh_site: dict[str, str]) -> None:
    done = run(["manage.py", "migrate", "workhorse", "0005", "-v", "0"], fresh_site)
    assert done.returncode == 0, done.stdout + done.stderr
    url, schema = fresh_site["URL"], fresh_site["WHDJ_SCHEMA"]
    assert [v for v, _ in ledger(url, schema)] == [1, 2, 3, 4, 5]
    assert "applied migrations 6," in workhorse_migrate(fresh_site)
    before = ledger(url, schema)
    done = run(["manage.py", "migrate", "-v", "0"], fresh_site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ledger(url, schema) == before and len(django_applied(url)) == latest_version()


def test_sqlmigrate_shows_the_sql_of_the_file(fresh_site: dict[str, str]) -> None:
    done = run(["manage.py", "sqlmigrate", "workhorse", "0001"], fresh_site)
    assert done.returncode == 0, done.stdout + done.stderr
    schema = fresh_site["WHDJ_SCHEMA"]
    assert f"create table if not exists {schema}.jobs" in done.stdout
    assert f"insert into {schema}.migrations (version, name) values (1, 'jobs')" in done.stdout
    assert "pg_advisory_xact_lock(hashtext('workhorse:migrate:" in done.stdout


def test_the_django_migration_cannot_be_reversed(fresh_site: dict[str, str]) -> None:
    assert run(["manage.py", "migrate", "workhorse", "0002", "-v", "0"], fresh_site).returncode == 0
    done = run(["manage.py", "migrate", "workhorse", "0001", "-v", "0"], fresh_site)
    assert done.returncode != 0 and "not reversible" in (done.stdout + done.stderr).lower()


def test_makemigrations_finds_nothing_to_add_for_workhorse(site: dict[str, str]) -> None:
    from django.core.management import call_command

    call_command("makemigrations", "workhorse", "--check", "--dry-run", verbosity=0)  # exits 1 on changes
