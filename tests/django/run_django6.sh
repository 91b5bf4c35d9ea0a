#!/usr/bin/env bash
# Run tests/django on Django 6 (its own django.tasks, no backport), which needs Python >= 3.12.
# Makes (or reuses) a virtual environment with Django 6 and workhorse from this checkout, then
# runs the Django tests there. The main suite runs them too when WORKHORSE_DJANGO6_PYTHON names
# that environment's python (tests/django/test_django6.py).
#
#   PYTHON312=/root/.pyenv/versions/3.12.1/bin/python tests/django/run_django6.sh
#   VENV=/tmp/wh-django6 (default) keeps the environment between runs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON312:-python3.12}"
venv="${VENV:-/tmp/wh-django6}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet "django>=6" pytest pytest-asyncio pytest-timeout -e "$root"
fi
"$venv/bin/python" -c 'import django, django.tasks; print("Django", django.get_version(), "with django.tasks")'
cd "$root"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "$@"
