"""Django's Tasks framework on workhorse: ``django.tasks`` (Django 6) or the ``django-tasks`` backport.

::

    TASKS = {
        "default": {
            "BACKEND": "workhorse.contrib.django.tasks.WorkhorseBackend",
            "QUEUES": ["default", "emails"],      # the queue names tasks may use (Django checks)
            "OPTIONS": {                           # every key optional; what Django's API cannot say
                "RETRY": {"attempts": 5},          # or a workhorse.Retry: each task's attempts and backoff
                "TENANT": "none",                  # or a function of the task's arguments -> str
                "TIMEOUT": "10m",                  # an attempt's time limit
            },
        }
    }

Each task is a workhorse job named by its module path (``myapp.tasks.send_welcome``), on the
App ``workhorse.contrib.django.get_app()`` answers. ``task.enqueue(*args, **kwargs)`` writes it:

- inside ``transaction.atomic()`` on the App's alias it joins the block (a ``DjangoApp``: the
  default), so it exists only if the block commits; ``aenqueue`` is Django's ``sync_to_async`` of it;
- ``priority`` is workhorse's priority (higher runs first), ``queue_name`` its queue, ``run_after``
  its ``run_at`` (a naive datetime is read in Django's current time zone);
- the arguments are stored as the payload ``{"args": [...], "kwargs": {...}}`` (JSON).

Per task, ``@workhorse_options(retry=..., tenant=..., timeout=..., concurrency=...)`` under
``@task`` overrides ``OPTIONS``; a ``tenant`` function is called with the task's arguments, a
``Concurrency(key=)`` function with the payload above.

``python manage.py workhorse_worker`` runs them: it imports each installed app's ``tasks`` module
and ``settings.WORKHORSE['TASK_MODULES']`` first, so every task defined there is known to it
(a task the worker never imported waits, and the worker names it in its unknown-names warning).

``get_result(id)`` / ``result.refresh()`` read the job row (on Django's connection, so inside the
block that enqueued it too): ``ready``/``delayed`` are ``READY``, ``running``/``suspended``
``RUNNING``, ``done`` ``SUCCESSFUL`` (``return_value`` is the stored result), ``failed``/``dead``/
``cancelled`` ``FAILED``; ``errors`` has one ``TaskError`` per failed attempt kept (the latest
with its traceback), ``attempts`` the attempts started.
"""

from __future__ import annotations

import importlib
import inspect
import json
import threading
import traceback
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

from workhorse._db.queries import django as sql
from workhorse.app import App
from workhorse.contrib.django import get_app
from workhorse.contrib.django.app import DjangoApp
from workhorse.durations import Duration
from workhorse.errors import ConfigurationError
from workhorse.jobs import JobHandle
from workhorse.limits.rules import Concurrency
from workhorse.retry import Retry


def _tasks_package() -> str:
    """``django.tasks`` where Django has it (6.0 on), else the ``django_tasks`` backport."""
    try:
        importlib.import_module("django.tasks")
    except ImportError:
        return "django_tasks"
    return "django.tasks"


PACKAGE = _tasks_package()
_base: ModuleType = importlib.import_module(f"{PACKAGE}.base")
_backends: ModuleType = importlib.import_module(f"{PACKAGE}.backends.base")
_exceptions: ModuleType = importlib.import_module(f"{PACKAGE}.exceptions")
_signals: ModuleType = importlib.import_module(f"{PACKAGE}.signals")
Status = _base.TaskResultStatus
_BaseBackend: Any = _backends.BaseTaskBackend
OPTIONS_ATTRIBUTE = "__workhorse_task_options__"
TASK_MARK = "__workhorse_django_task__"  # on a task's job body: the module path of the task it runs
# Every task defined for a WorkhorseBackend in this process, by (backend alias, module path).
# Process-wide: Django makes a backend per thread, and a task module is imported in one of them.
_defined: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()
BACKEND_OPTIONS = ("RETRY", "TENANT", "TIMEOUT")
STATUS = {
    "ready": "READY",
    "delayed": "READY",
    "pending": "READY",
    "running": "RUNNING",
    "suspended": "RUNNING",
    "done": "SUCCESSFUL",
    "failed": "FAILED",
    "dead": "FAILED",
    "cancelled": "FAILED",
}


def workhorse_options(
    *,
    retry: Retry | None = None,
    tenant: Callable[..., str] | str | None = None,
    timeout: Duration | None = None,
    concurrency: int | Concurrency | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What Django's ``@task`` cannot say, for one task; put it under ``@task``::

    @task(queue_name="emails")
    @workhorse_options(retry=Retry(attempts=5), tenant=lambda user_id, **_: str(user_id))
    def send_welcome(user_id): ...
    """
    given = {"retry": retry, "tenant": tenant, "timeout": timeout, "concurrency": concurrency}

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, OPTIONS_ATTRIBUTE, {k: v for k, v in given.items() if v is not None})
        return fn

    return mark


class WorkhorseBackend(_BaseBackend):  # type: ignore[misc]  # Django ships no type hints
    """Django's task backend on workhorse (see the module)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.defaults = _backend_options(alias, self.options)

    # -- declaring ---------------------------------------------------------------------------

    @property
    def tasks(self) -> dict[str, Any]:
        """Every task defined for this backend's alias in this process, by module path."""
        with _lock:
            return {path: task for (alias, path), task in _defined.items() if alias == self.alias}

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        with _lock:
            _defined.setdefault((self.alias, task.module_path), task)

    def declare_all(self) -> list[str]:
        """Declare every task defined so far on the App (the worker calls it); answers their names."""
        return [self.handle_for(task).name for task in self.tasks.values()]

    def handle_for(self, task: Any) -> JobHandle[Any]:
        """The workhorse job of ``task`` on the project's App, declared on first use (by whichever
        thread's backend comes first: the others find it on the App)."""
        app = get_app()
        path = task.module_path
        with _lock:
            _defined.setdefault((self.alias, path), task)
            handle = app.jobs.get(path)
            if handle is not None and getattr(handle.fn, TASK_MARK, None) == path:
                return handle
            return self._declare(app, task, path)

    def _declare(self, app: App, task: Any, path: str) -> JobHandle[Any]:
        options = {**self.defaults, **getattr(task.func, OPTIONS_ATTRIBUTE, {})}
        tenant = options.get("tenant", "none")
        body = _async_body(self, path) if inspect.iscoroutinefunction(task.func) else _body(self, path)
        handle = app.job(
            name=path,
            queue=task.queue_name,
            tenant=tenant if tenant == "none" else _by_arguments(tenant, path),
            retry=options.get("retry"),
            timeout=options.get("timeout"),
            priority=task.priority,
            concurrency=options.get("concurrency"),
        )(body)
        setattr(handle.fn, TASK_MARK, path)
        return handle

    # -- enqueueing --------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        from django.utils import timezone

        self.validate_task(task)
        handle = self.handle_for(task)
        payload = {"args": _base.normalize_json(list(args)), "kwargs": _base.normalize_json(dict(kwargs))}
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):
            run_at = timezone.make_aware(run_at)
        ref = handle.enqueue_sync(payload, priority=task.priority, queue=task.queue_name, run_at=run_at)
        result = self._result(task, ref.id, Status.READY, payload)
        _signals.task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        row = _read_row(result_id)
        if row is None:
            raise _exceptions.TaskResultDoesNotExist(result_id)
        task = self._task_named(row["name"], result_id)
        result = self._result(task, row["id"], getattr(Status, STATUS[row["state"]]), row["payload"])
        attempts = int(row["attempt"])
        object.__setattr__(result, "enqueued_at", row["created_at"])
        object.__setattr__(result, "started_at", row["started_at"])
        object.__setattr__(result, "last_attempted_at", row["started_at"])
        object.__setattr__(result, "finished_at", row["finished_at"])
        object.__setattr__(result, "worker_ids", [row["worker_id"] or "workhorse"] * attempts)
        object.__setattr__(result, "errors", _errors(row))
        if row["state"] == "done":
            object.__setattr__(result, "_return_value", row["result"])
        return result

    def _task_named(self, path: str, result_id: str) -> Any:
        with _lock:
            found = _defined.get((self.alias, path))
        if found is not None:
            return found
        from django.utils.module_loading import import_string

        try:
            found = import_string(path)
        except ImportError:
            found = None
        if not isinstance(found, _base.Task):
            raise _exceptions.TaskResultDoesNotExist(f"{result_id} (job {path!r} is no task of this project)")
        return found

    def _result(self, task: Any, result_id: str, status: Any, payload: Any) -> Any:
        return _base.TaskResult(
            task=task,
            id=result_id,
            status=status,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    # -- running (in the worker) -------------------------------------------------------------

    def start(self, ctx: Any, path: str, payload: Any) -> tuple[Any, Any, list[Any], dict[str, Any]]:
        with _lock:
            task = _defined[(self.alias, path)]
        result = self._result(task, ctx.id, Status.RUNNING, payload)
        object.__setattr__(result, "worker_ids", [ctx.worker_id] * ctx.attempt)
        _signals.task_started.send(type(self), task_result=result)
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        if task.takes_context:
            args.insert(0, _base.TaskContext(task_result=result))
        return task, result, args, kwargs

    def finish(self, result: Any, value: Any = None, error: BaseException | None = None) -> Any:
        if error is not None:
            object.__setattr__(result, "status", Status.FAILED)
            text = "".join(traceback.format_exception(error))
            result.errors.append(_base.TaskError(exception_class_path=_path_of(type(error)), traceback=text))
            _signals.task_finished.send(type(self), task_result=result)
            return None
        value = _base.normalize_json(value)
        object.__setattr__(result, "status", Status.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        _signals.task_finished.send(type(self), task_result=result)
        return value


def declare_tasks() -> list[str] | None:
    """For the worker: import every installed app's ``tasks`` module and
    ``settings.WORKHORSE['TASK_MODULES']``, then declare every task of each ``WorkhorseBackend``
    in ``settings.TASKS`` on the App. Answers the queues those backends allow (None: any queue)."""
    from django.utils.module_loading import autodiscover_modules

    from workhorse.contrib.django.settings import task_modules

    autodiscover_modules("tasks")
    for module in task_modules():
        importlib.import_module(module)
    handler = importlib.import_module(PACKAGE).task_backends
    queues: set[str] = set()
    for alias in handler.settings:
        backend = handler[alias]
        if isinstance(backend, WorkhorseBackend):
            backend.declare_all()
            if not backend.queues:
                return None
            queues |= set(backend.queues)
    return sorted(queues)


def _body(backend: WorkhorseBackend, path: str) -> Callable[[Any, Any], Any]:
    def run_task(ctx: Any, payload: Any) -> Any:
        task, result, args, kwargs = backend.start(ctx, path, payload)
        try:
            value = task.func(*args, **kwargs)
        except Exception as error:
            backend.finish(result, error=error)
            raise
        return backend.finish(result, value)

    run_task.__qualname__ = run_task.__name__ = f"task:{path}"
    return run_task


def _async_body(backend: WorkhorseBackend, path: str) -> Callable[[Any, Any], Any]:
    async def run_task(ctx: Any, payload: Any) -> Any:
        task, result, args, kwargs = backend.start(ctx, path, payload)
        try:
            value = await task.func(*args, **kwargs)
        except Exception as error:
            backend.finish(result, error=error)
            raise
        return backend.finish(result, value)

    run_task.__qualname__ = run_task.__name__ = f"task:{path}"
    return run_task


def _by_arguments(tenant: Any, path: str) -> Callable[[Any], str]:
    if not callable(tenant):
        raise ConfigurationError(
            code="JOB_TENANT_REQUIRED",
            cause=f"task {path!r}: tenant expected 'none' or a function of the task's arguments, got {tenant!r}",
            fix="@workhorse_options(tenant=lambda org_id, **_: str(org_id))   # or OPTIONS {'TENANT': 'none'}",
        )

    def of_payload(payload: Any) -> str:
        return str(tenant(*payload.get("args", []), **payload.get("kwargs", {})))

    return of_payload


def _backend_options(alias: str, given: Any) -> dict[str, Any]:
    if not isinstance(given, dict) or any(key not in BACKEND_OPTIONS for key in given):
        raise ConfigurationError(
            cause=f"TASKS[{alias!r}]['OPTIONS'] takes the keys {', '.join(BACKEND_OPTIONS)}, got {given!r}",
            fix="'OPTIONS': {'RETRY': {'attempts': 5}, 'TENANT': 'none', 'TIMEOUT': '10m'}   # in TASKS",
        )
    options: dict[str, Any] = {}
    retry = given.get("RETRY")
    if isinstance(retry, dict):
        try:
            retry = Retry(**{str(k).lower(): v for k, v in retry.items()})
        except TypeError as error:
            raise ConfigurationError(
                cause=f"TASKS[{alias!r}]['OPTIONS']['RETRY'] is not Retry's options: {error}",
                fix="'RETRY': {'attempts': 5}   # Retry's keyword arguments, or a workhorse.Retry",
            ) from error
    if retry is not None:
        options["retry"] = retry
    if "TENANT" in given:
        options["tenant"] = given["TENANT"]
    if "TIMEOUT" in given:
        options["timeout"] = given["TIMEOUT"]
    return options


def _read_row(result_id: str) -> dict[str, Any] | None:
    """The job of ``result_id`` as a dict (JSON columns decoded), or None."""
    try:
        uuid.UUID(str(result_id))
    except ValueError:
        return None
    app = get_app()
    if isinstance(app, DjangoApp):
        from django.db import connections

        with connections[app.database_alias].cursor() as cur:
            cur.execute(sql.TASK_RESULT.replace("{schema}", app.schema), {"id": result_id})
            found = cur.fetchone()
            if found is None:
                return None
            row = dict(zip([c[0] for c in cur.description], found, strict=True))
        for key in ("payload", "result", "last_error", "errors"):
            if isinstance(row[key], str):
                row[key] = json.loads(row[key])
        return row
    from workhorse.contrib.django.portal import call

    job = call(lambda: app.get_job(result_id))
    if job is None:
        return None
    return {
        "id": job.id, "name": job.name, "state": job.state, "payload": job.payload, "result": job.result,
        "last_error": job.last_error, "errors": job.errors, "attempt": job.attempt, "worker_id": job.worker_id,
        "created_at": job.created_at, "started_at": job.started_at, "finished_at": job.finished_at,
    }  # fmt: skip


def _errors(row: dict[str, Any]) -> list[Any]:
    """One TaskError per failed attempt kept, oldest first; the latest has its traceback."""
    last = row["last_error"] or {}
    kept = list(row["errors"] or [])
    if last and not kept:
        kept = [{"type": last.get("type"), "message": last.get("message")}]
    found = []
    for i, entry in enumerate(kept):
        latest = i == len(kept) - 1 and last
        text = last.get("traceback", "") if latest else f"{entry.get('type')}: {entry.get('message')}"
        path = _path_in_traceback(text) if latest else None
        found.append(_base.TaskError(exception_class_path=path or _path_named(entry.get("type")), traceback=text))
    return found


def _path_of(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _path_named(name: Any) -> str:
    """A type's path from the name stored for it: builtins by their name, others as stored."""
    import builtins

    text = str(name or "Exception")
    return f"builtins.{text}" if "." not in text and hasattr(builtins, text) else text


def _path_in_traceback(text: str) -> str | None:
    """The exception's dotted path from the last line of its traceback (``module.Type: message``)."""
    lines = [line for line in text.splitlines() if line and not line.startswith((" ", "\t"))]
    if not lines:
        return None
    head = lines[-1].split(":", 1)[0].strip()
    return _path_named(head) if head.replace(".", "").replace("_", "").isalnum() else None
