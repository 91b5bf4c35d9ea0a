"""The Django app config of ``workhorse.contrib.django``."""

from __future__ import annotations

from django.apps import AppConfig


class WorkhorseConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    name = "workhorse.contrib.django"
    label = "workhorse"
    verbose_name = "workhorse"
