"""The Django tests' fixtures (``djsite`` has the helpers): the test project set up in this
process on a fresh database, and a fresh database for a test of its own."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("django")

from djsite import SITE, create_database, drop_database, site_env, url_of


@pytest.fixture(scope="session")
def site(database_url: str) -> Iterator[dict[str, str]]:
    """Django set up in this process on a fresh database, after ``migrate`` (workhorse's included)."""
    dbname = create_database(database_url)
    env = site_env(database_url, dbname, f"wh_{uuid.uuid4().hex[:10]}")
    os.environ.update(env)
    sys.path.insert(0, str(SITE))
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    import django

    django.setup()
    setup_test_environment()  # the test client then keeps each response's context (its messages)
    call_command("migrate", verbosity=0)
    try:
        yield {**env, "URL": url_of(database_url, dbname)}
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(database_url, dbname)


@pytest.fixture
def fresh_site(database_url: str) -> Iterator[dict[str, str]]:
    """The test project's environment on a database created for this test alone (nothing migrated)."""
    dbname = create_database(database_url)
    try:
        yield {**site_env(database_url, dbname, f"wh_{uuid.uuid4().hex[:10]}"), "URL": url_of(database_url, dbname)}
    finally:
        drop_database(database_url, dbname)
