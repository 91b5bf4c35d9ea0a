"""The dashboard's ASGI application: the gate (token, security headers), the pages and the
templates. The actions (POST only) are in ``workhorse.dashboard.actions``.

Design: docs/guides/dashboard.md
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workhorse.app import App
from workhorse.dashboard.actions import Actions
from workhorse.dashboard.charts import bars, hour_of, state_mix
from workhorse.dashboard.security import (
    COOKIE,
    TOKEN_PARAMETER,
    DashboardRefusal,
    Guard,
    is_loopback,
    own_path,
    text_fields,
)
from workhorse.dashboard.views import (
    OVERVIEW_STATES,
    ago,
    breakable,
    bulk_verbs,
    error_line,
    job_filters,
    job_verbs,
    number,
    percent,
    pretty,
    progress_fraction,
    progress_line,
    span,
    stamp,
    step_views,
    when_text,
)
from workhorse.drivers.base import SEARCH_SCAN
from workhorse.errors import (
    ConfigurationError,
    DatabaseError,
    JobNotFoundError,
    OperatorRefusedError,
    SchemaError,
    WorkhorseError,
)
from workhorse.health.report import HealthWarning
from workhorse.ids import short_id

HERE = Path(__file__).parent
STATIC = {  # the only files served: vendored, written here, nothing from a CDN
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
# Scripts and styles only from this origin (no inline script runs, even one that slipped through
# escaping); forms post only here; no page may frame the dashboard (clickjacking).
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
NOTICES = {
    "cancelled": "Cancelled.",
    "requeued": "Requeued: it runs again from its first attempt.",
    "promoted": "Promoted: it is due now.",
    "removed": "Removed, with its steps.",
    "paused": "Paused: no worker claims from this queue until it is resumed.",
    "resumed": "Resumed.",
    "not-paused": "That queue was not paused.",
}
Handler = Callable[[Request], Awaitable[Response]]


def status_of(error: WorkhorseError) -> int:
    if isinstance(error, DashboardRefusal):
        return error.status
    if isinstance(error, JobNotFoundError):
        return 404
    if isinstance(error, OperatorRefusedError):
        return 409
    if isinstance(error, DatabaseError | SchemaError):
        return 503
    return 400


HEALTH_EVERY = 30.0  # seconds between two reads of the database's health by one dashboard


@dataclass
class Dashboard:
    """One dashboard: the app it shows, its rules, and its templates."""

    app: App
    guard: Guard
    read_only: bool
    refresh_seconds: float
    templates: Environment
    _health: tuple[float, list[HealthWarning]] | None = None  # (monotonic read at, warnings), see HEALTH_EVERY

    async def health_warnings(self) -> list[HealthWarning]:
        """The database's health warnings, read at most once per HEALTH_EVERY (two statements):
        a refresh of the overview stays two statements, and the banner is at most that old."""
        now = time.monotonic()
        if self._health is None or now - self._health[0] >= HEALTH_EVERY:
            report = await self.app.admin.health()
            self._health = (now, [] if report is None else report.warnings)
        return self._health[1]

    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def url(self, request: Request, path: str, query: Mapping[str, Any] | None = None) -> str:
        shown = {k: v for k, v in (query or {}).items() if v is not None and v != ""}
        return self.base(request) + path + ("?" + urlencode(shown) if shown else "")

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        notice = request.query_params.get("notice")
        context.setdefault("error", None)
        here = context.pop("here", request.url.path + (f"?{request.url.query}" if request.url.query else ""))
        html = self.templates.get_template(template).render(
            request_path=request.url.path,
            base=self.base(request),
            csrf=self.guard.csrf,
            read_only=self.read_only,
            notice=bulk_notice(request.query_params) if notice == "bulk" else NOTICES.get(notice or ""),
            url=lambda path, **query: self.url(request, path, query),
            here=here,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def refusal(self, request: Request, error: WorkhorseError, **context: Any) -> HTMLResponse:
        context.setdefault("page", "error")
        return self.render(request, "error.html", status_of(error), error=error, **context)

    # -- pages -------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        try:
            live = await self.live_context()
        except WorkhorseError as error:
            return self.refusal(request, error, page="overview")
        return self.render(request, "overview.html", page="overview", refresh=self.refresh_seconds, **live)

    async def overview_live(self, request: Request) -> Response:
        try:
            live = await self.live_context()
        except WorkhorseError as error:
            return self.refusal(request, error, page="overview")
        return self.render(
            request, "_overview_live.html", refresh=self.refresh_seconds, here=self.url(request, "/"), **live
        )

    async def live_context(self) -> dict[str, Any]:
        """What one refresh of the overview reads: ``stats`` (one snapshot statement, plus the
        flow usage when the app declares caps), the last hour's minute counters (one), and the
        database's health warnings for the banner (two more, once per HEALTH_EVERY)."""
        stats = await self.app.admin.stats("1h")
        health = await self.health_warnings()
        minutes = await self.app.admin.counter_minutes("1h")
        per_minute = [(bucket, c.queue, c.completed, c.retried + c.failed + c.dead) for bucket, c in minutes]
        rows = []
        totals = dict.fromkeys(OVERVIEW_STATES, 0)
        for q in stats.queues:
            counts = {state: getattr(q, state) for state in OVERVIEW_STATES}
            for state, n in counts.items():
                totals[state] += n
            hour = hour_of(per_minute, q.queue, stats.at)
            rows.append(
                {
                    "queue": q.queue,
                    "counts": counts,
                    "oldest": None if q.oldest_ready_age is None else span(q.oldest_ready_age),
                    "throughput": q.throughput,
                    "failure_rate": q.failure_rate,
                    "completed": q.completed,
                    "failures": q.failures + q.retried,
                    "paused": q.paused,
                    "held_back": q.held_back,
                    "lapsed": q.lease_lapsed,  # running rows whose lease lapsed: not in counts["running"]
                    "lapsed_ago": span(q.oldest_lapse_age or 0.0),
                    "chart": bars(hour),
                    "mix": state_mix(list(counts.items())),
                }
            )
        return {
            "stats": stats,
            "health": health,
            "rows": rows,
            "totals": totals,
            "states": OVERVIEW_STATES,
            "at": stats.at,
            "lapsed": sum(q.lease_lapsed for q in stats.queues),
            "completed_hour": sum(q.completed for q in stats.queues),
            "failures_hour": sum(q.failures + q.retried for q in stats.queues),
        }

    async def jobs(self, request: Request) -> Response:
        params = dict(request.query_params)
        context: dict[str, Any] = {"page": "jobs", "filters": params, "jobs": [], "next": None, "prev": None}
        context.update(scanned=None, search_scan=SEARCH_SCAN)
        try:
            filters = job_filters(params)
            context.update(filters=filters.values, query=filters.query(), bulk=bulk_verbs(filters.get("state")))
            page = await self.app.admin.list(
                **filters.list_arguments(), after=params.get("after") or None, before=params.get("before") or None
            )
        except WorkhorseError as error:
            context.update(query=context.get("query", {}), bulk=[])
            return self.render(request, "jobs.html", status_of(error), error=error, **context)
        context.update(jobs=page.jobs, next=page.next, prev=page.prev, scanned=page.scanned, search_scan=SEARCH_SCAN)
        context.update(now=datetime.now(UTC))  # clock-ok: display
        return self.render(request, "jobs.html", **context)

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            job = await self.app.admin.get(job_id)
            if job is None:
                full = await self.app.admin.resolve(job_id)  # a unique prefix: go to the whole id
                if full != job_id and await self.app.admin.get(full) is not None:
                    return RedirectResponse(self.url(request, f"/jobs/{full}"), status_code=303)
                raise JobNotFoundError(job_id)
            waiting = await self.app.admin.why_waiting(job)
        except WorkhorseError as error:
            return self.refusal(request, error, page="jobs")
        # Every failed attempt's error, newest first; the latest one keeps its whole traceback.
        last = job.last_error or {}
        attempts = [dict(e) for e in job.errors] or ([dict(last)] if last else [])
        if attempts and last.get("traceback"):
            attempts[-1].setdefault("traceback", last["traceback"])
        return self.render(
            request,
            "job.html",
            page="jobs",
            job=job,
            now=datetime.now(UTC),  # clock-ok: relative times, display only
            verbs=[] if self.read_only else job_verbs(job),
            steps=step_views(job),
            attempts=list(reversed(attempts)),
            waiting=waiting,
            payload=pretty(job.payload),
            result=None if job.result is None else pretty(job.result),
            progress=progress_line(job.progress),
            fraction=progress_fraction(job.progress),
            step_names=[s.name for s in step_views(job)],
        )

    async def workers(self, request: Request) -> Response:
        try:
            workers = await self.app.admin.workers()
            report = await self.app.admin.tasks()
        except WorkhorseError as error:
            return self.refusal(request, error, page="workers")
        return self.render(request, "workers.html", page="workers", workers=workers, report=report, now=report.db_now)

    async def tasks(self, request: Request) -> Response:
        try:
            report = await self.app.admin.tasks()
        except WorkhorseError as error:
            return self.refusal(request, error, page="tasks")
        return self.render(request, "tasks.html", page="tasks", report=report, now=report.db_now)

    async def static(self, request: Request) -> Response:
        name = request.path_params["file"]
        if name not in STATIC:
            raise HTTPException(404)
        body = (HERE / "static" / name).read_bytes()
        return Response(body, media_type=STATIC[name], headers={"cache-control": "public, max-age=3600"})

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 405:
            error = DashboardRefusal(
                405,
                f"{request.method} {request.url.path} is not allowed: actions are POSTs from the dashboard's buttons",
                "use the page's buttons (each asks you to confirm)",
                code="DASHBOARD_METHOD_NOT_ALLOWED",
            )
        else:
            error = DashboardRefusal(
                status, f"no page at {request.url.path}", "start from the overview", code="DASHBOARD_NOT_FOUND"
            )
        return self.refusal(request, error)


def bulk_notice(query: Mapping[str, str]) -> str:
    try:
        affected, remaining = int(query.get("affected", "")), int(query.get("remaining", ""))
    except ValueError:
        return "Done."
    verb = {"requeue": "Requeued", "cancel": "Cancelled", "promote": "Promoted"}.get(query.get("verb", ""), "Moved")
    return f"{verb} {affected:,} job{'s' if affected != 1 else ''}; {remaining:,} remaining (click again to go on)."


def local_url(scope: Scope, base: str) -> str:
    """The dashboard's address on loopback, for DASHBOARD_HOST_REFUSED's fix: the listening
    address when it is loopback (else 127.0.0.1) and its port."""
    server = scope.get("server")
    host = str(server[0]) if server and is_loopback(str(server[0])) else "127.0.0.1"
    port = f":{server[1]}" if server and server[1] is not None else ""
    shown = f"[{host}]" if ":" in host else host
    return f"{scope.get('scheme', 'http')}://{shown}{port}{base}/"


class Gate:
    """The ASGI middleware in front of every route: the loopback ``Host`` rule without a token,
    the token with one (the static files excepted from both: they hold nothing of the queue, and
    the refusal page needs its style) and the security headers."""

    def __init__(self, inner: ASGIApp, dashboard: Dashboard) -> None:
        self.inner = inner
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        request = Request(scope, receive)
        route = request.url.path[len(self.dashboard.base(request)) :]
        if not route.startswith("/static/"):
            try:
                text_fields(scope.get("query_string", b""), "query string")
                self.dashboard.guard.check_host(request.headers, local_url(scope, self.dashboard.base(request)))
                verdict = self.dashboard.guard.admits(
                    request.headers, request.cookies, request.query_params.get(TOKEN_PARAMETER)
                )
            except DashboardRefusal as error:
                response: Response = self.dashboard.refusal(request, error, page="login")
                if error.status == 401:
                    response.headers["www-authenticate"] = 'Bearer realm="workhorse"'
                await response(scope, receive, with_headers)
                return
            if verdict == "login":  # the token leaves the address bar and the history at once
                kept = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAMETER]
                query = urlencode(kept)  # the path as requested, but only ever a path of this dashboard's origin
                response = RedirectResponse(own_path(scope["path"]) + (f"?{query}" if query else ""), 303)
                response.set_cookie(
                    COOKIE,
                    self.dashboard.guard.session,
                    httponly=True,
                    samesite="strict",
                    secure=request.url.scheme == "https",
                    path=self.dashboard.base(request) or "/",
                )
                await response(scope, receive, with_headers)
                return
        await self.inner(scope, receive, with_headers)


def build(app: App, *, token: str | None, read_only: bool, refresh_seconds: float) -> Starlette:
    """The dashboard of ``app`` (see ``workhorse.dashboard.make_asgi_app``)."""
    if isinstance(refresh_seconds, bool) or not isinstance(refresh_seconds, int | float) or refresh_seconds < 1:
        raise ConfigurationError(
            code="DASHBOARD_REFRESH_INVALID",
            cause=f"refresh_seconds expected a number of seconds of at least 1, got {refresh_seconds!r}",
            fix="make_asgi_app(app, refresh_seconds=5)",
        )
    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),  # every value escaped
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters.update(
        ago=ago,
        span=span,
        number=number,
        percent=percent,
        stamp=stamp,
        when=when_text,
        error_line=error_line,
        progress_line=progress_line,
        short_id=short_id,
        breakable=breakable,
    )
    dashboard = Dashboard(app, Guard(token), bool(read_only), float(refresh_seconds), templates)
    act = Actions(dashboard)
    routes = [
        Route("/", dashboard.overview, name="overview"),
        Route("/overview/live", dashboard.overview_live, name="overview_live"),
        Route("/jobs", dashboard.jobs, name="jobs"),
        Route("/jobs/{job_id}", dashboard.job, name="job"),
        Route("/jobs/{job_id}/{verb}", act.job, methods=["POST"], name="job_action"),
        Route("/bulk/{verb}", act.bulk, methods=["POST"], name="bulk_action"),
        Route("/bulk/{verb}/count", act.bulk_count, name="bulk_count"),
        Route("/queues/{verb}", act.queue, methods=["POST"], name="queue_action"),
        Route("/workers", dashboard.workers, name="workers"),
        Route("/tasks", dashboard.tasks, name="tasks"),
        Route("/static/{file}", dashboard.static, name="static"),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: dashboard.not_found},
        middleware=[Middleware(Gate, dashboard=dashboard)],
    )
