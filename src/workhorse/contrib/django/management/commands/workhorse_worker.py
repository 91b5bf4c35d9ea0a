"""``python manage.py workhorse_worker [options]``: ``workhorse worker`` with Django set up.

Design: docs/guides/django.md
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from workhorse.contrib.django import close_old_connections, get_app
from workhorse.contrib.django.settings import app_spec_setting


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Run a workhorse worker for settings.WORKHORSE_APP (takes every option of `workhorse worker`)."

    def add_arguments(self, parser: Any) -> None:
        # For call_command(); from manage.py every argument passes through unparsed (run_from_argv).
        parser.add_argument("--queues")
        parser.add_argument("--concurrency")
        parser.add_argument("--visibility-timeout")
        parser.add_argument("--burst", action="store_true")
        parser.add_argument("--no-scheduler", action="store_true")

    def run_from_argv(self, argv: list[str]) -> None:
        """``manage.py workhorse_worker ...``: every argument goes to ``workhorse worker`` as given
        (``manage.py`` has already read ``--settings`` and ``--pythonpath``)."""
        self.handle(worker_args=argv[2:])

    def handle(self, *args: Any, **options: Any) -> None:
        from workhorse.cli.main import State, cli, load_app

        worker_args = options.get("worker_args")
        if worker_args is None:
            worker_args = [
                *(arg for name in ("queues", "concurrency", "visibility_timeout") if options.get(name)
                  for arg in (f"--{name.replace('_', '-')}", str(options[name]))),
                *(f"--{name.replace('_', '-')}" for name in ("burst", "no_scheduler") if options.get(name)),
            ]  # fmt: skip
        spec = app_spec_setting()
        app = load_app(spec) if spec is not None else get_app()  # load_app answers the module's one App
        if _runs_django_tasks():
            from workhorse.contrib.django.tasks import declare_tasks

            allowed = declare_tasks()
            if allowed is not None and not any(a == "--queues" or a.startswith("--queues=") for a in worker_args):
                served = sorted({h.queue for h in app.jobs.values()} | set(allowed))
                worker_args = ["--queues", ",".join(served), *worker_args]
        close_old_connections(app)
        state = State(standalone=True, _app=app) if spec is None else State(standalone=True)
        cli.main(
            args=[*(["--app", spec] if spec is not None else []), "worker", *worker_args],
            prog_name="manage.py workhorse_worker",
            obj=state,
        )


def _runs_django_tasks() -> bool:
    """Whether ``settings.TASKS`` names workhorse's backend (then the worker runs Django tasks too)."""
    from django.conf import settings

    configured = getattr(settings, "TASKS", None) or {}
    backend = "workhorse.contrib.django.tasks.WorkhorseBackend"
    return any(isinstance(c, dict) and c.get("BACKEND") == backend for c in configured.values())
