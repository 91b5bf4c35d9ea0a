"""The Django admin of workhorse's jobs: read-only pages, with requeue and cancel as actions.

Design: docs/guides/django.md
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.utils.html import format_html, format_html_join

from workhorse.contrib.django import get_app
from workhorse.contrib.django.models import Job
from workhorse.contrib.django.portal import call
from workhorse.contrib.django.settings import database_alias
from workhorse.errors import WorkhorseError

STEP_COLUMNS = ("position", "name", "state", "attempt", "started_at", "finished_at", "result", "error")
RECENT = 1_000  # the latest jobs whose names, queues and tenants the filters offer
COUNT_CAP = 10_000  # rows the pager counts at most: a count of the whole table costs a scan of it


class _RecentValues(admin.SimpleListFilter):  # type: ignore[misc]  # Django ships no type hints
    """A filter on one column whose choices come from the latest RECENT jobs (an index scan of the
    newest rows), not a DISTINCT over the table; any value given in the address applies."""

    column = ""

    def declared(self) -> set[str]:
        return set()

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        newest = model_admin.get_queryset(request).order_by("-id")[:RECENT]  # UUIDv7: the primary key
        found = {v for v in newest.values_list(self.column, flat=True) if v is not None} | self.declared()
        if self.value():
            found.add(self.value())
        return [(v, v) for v in sorted(found)]

    def queryset(self, request: Any, queryset: Any) -> Any:
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.column: value})


class NameFilter(_RecentValues):
    title = parameter_name = column = "name"

    def declared(self) -> set[str]:
        return set(get_app().jobs)


class QueueFilter(_RecentValues):
    title = parameter_name = column = "queue"

    def declared(self) -> set[str]:
        return {handle.queue for handle in get_app().jobs.values()}


class TenantFilter(_RecentValues):
    title = parameter_name = column = "tenant"


class CappedPaginator(Paginator):  # type: ignore[misc]  # Django ships no type hints
    """Counts at most COUNT_CAP + 1 rows (``select count(*) from (... limit N)``): the pages past
    that are reached with the filters, not by paging through millions."""

    @functools.cached_property
    def count(self) -> int:
        return int(self.object_list.order_by()[: COUNT_CAP + 1].count())


def _operate(model_admin: Any, request: Any, jobs: Iterable[Job], verb: str, done: str) -> None:
    """Apply ``app.admin.<verb>`` to each job; report how many it took and each refusal's code."""
    app = get_app()
    taken, refused = 0, []
    for job in jobs:
        job_id = str(job.id)
        method: Callable[[str], Awaitable[Any]] = getattr(app.admin, verb)
        try:
            call(functools.partial(method, job_id))
        except WorkhorseError as error:
            refused.append(f"{job_id}: {error.code}: {error.cause}")
        else:
            taken += 1
    if taken:
        model_admin.message_user(request, f"{done} {taken} job{'s' if taken != 1 else ''}", messages.SUCCESS)
    for line in refused:
        model_admin.message_user(request, line, messages.ERROR)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict) and "type" in value:
        return f"{value.get('type')}: {value.get('message')}"
    return str(value)


class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no type hints
    list_display = ("id", "name", "queue", "state", "tenant", "attempts", "priority", "created_at", "run_at")
    list_filter = ("state", QueueFilter, NameFilter, TenantFilter)
    paginator = CappedPaginator
    search_fields = ("=name", "=key")
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False  # a count(*) over the whole table on every page: skipped
    actions = ("requeue", "cancel")
    exclude = ("last_error", "errors")
    readonly_fields = (
        "id", "name", "queue", "state", "tenant", "priority", "key", "attempt", "max_attempts", "dead_letter",
        "claims", "worker_id", "lease_expires_at", "run_at", "created_at", "started_at", "finished_at",
        "updated_at", "flow_key", "traceparent", "payload", "result", "progress",
        "last_error_shown", "errors_shown", "step_timeline",
    )  # fmt: skip

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(database_alias())

    # -- read-only -------------------------------------------------------------------------------

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False  # nothing is edited here; the actions ask has_operate_permission

    def has_operate_permission(self, request: Any) -> bool:
        return bool(request.user.has_perm("workhorse.change_job"))

    # -- columns ---------------------------------------------------------------------------------

    @admin.display(description="attempts")  # type: ignore[untyped-decorator]
    def attempts(self, job: Job) -> str:
        return f"{job.attempt}/{job.max_attempts}"

    @admin.display(description="last error")  # type: ignore[untyped-decorator]
    def last_error_shown(self, job: Job) -> str:
        error = job.last_error or {}
        if not error:
            return "-"
        return str(
            format_html(
                "<strong>{}</strong>: {}<pre>{}</pre>",
                error.get("type", ""),
                error.get("message", ""),
                error.get("traceback", ""),
            )
        )

    @admin.display(description="failed attempts")  # type: ignore[untyped-decorator]
    def errors_shown(self, job: Job) -> str:
        rows = job.errors or []
        if not rows:
            return "-"
        return str(
            format_html(
                "<table><tr><th>attempt</th><th>at</th><th>error</th></tr>{}</table>",
                format_html_join(
                    "",
                    "<tr><td>{}</td><td>{}</td><td>{}: {}</td></tr>",
                    ((e.get("attempt"), e.get("at"), e.get("type"), e.get("message")) for e in rows),
                ),
            )
        )

    @admin.display(description="step timeline")  # type: ignore[untyped-decorator]
    def step_timeline(self, job: Job) -> str:
        app, job_id = get_app(), str(job.id)
        found = call(lambda: app.admin.get(job_id))
        steps = [] if found is None else found.steps
        if not steps:
            return "-"
        head = format_html_join("", "<th>{}</th>", ((c.replace("_", " "),) for c in STEP_COLUMNS))
        body = format_html_join(
            "",
            "<tr>" + "<td>{}</td>" * len(STEP_COLUMNS) + "</tr>",
            (tuple(_cell(s.get(c)) for c in STEP_COLUMNS) for s in steps),
        )
        return str(format_html("<table><tr>{}</tr>{}</table>", head, body))

    # -- actions: the operator API ---------------------------------------------------------------

    @admin.action(description="Requeue the selected jobs (a fresh run)", permissions=["operate"])  # type: ignore[untyped-decorator]
    def requeue(self, request: Any, queryset: Any) -> None:
        _operate(self, request, queryset, "requeue", "requeued")

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])  # type: ignore[untyped-decorator]
    def cancel(self, request: Any, queryset: Any) -> None:
        _operate(self, request, queryset, "cancel", "cancelled")


admin.site.register(Job, JobAdmin)
