"""Which Tasks framework the Django tests ran on, and Django 6's when a Python >= 3.12 has it.

Under the project's Python (3.11: Django 5.2) the tasks tests run on the django-tasks backport.
With WORKHORSE_DJANGO6_PYTHON naming a python that has Django 6 and workhorse installed
(tests/django/run_django6.sh makes one), this test runs the whole of tests/django there too."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

import django

ENV = "WORKHORSE_DJANGO6_PYTHON"
HERE = Path(__file__).parent


@pytest.mark.timeout(900)
def test_the_django_tests_on_django_6() -> None:
    if importlib.util.find_spec("django.tasks") is not None:
        pytest.skip(f"this run is on Django {django.get_version()} itself: the tasks tests used django.tasks")
    python = os.environ.get(ENV)
    if not python:
        pytest.skip(
            f"Django {django.get_version()} here: the tasks tests ran on the django-tasks backport; "
            f"set {ENV} to a Python >= 3.12 with Django 6 (tests/django/run_django6.sh) to run them on django.tasks"
        )
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE)],
        cwd=HERE.parent.parent, capture_output=True, text=True, timeout=850, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
