"""The dashboard's actions: every one a POST, refused in read-only mode, then checked for its
origin and CSRF token, then confirmed, then done through ``app.admin``.

Confirmation works with and without script: the page's script asks ``confirm()`` and adds
``confirm=yes``; a form posted without it is answered with a page asking to confirm, whose button
posts it again with ``confirm=yes``. Either way a bulk verb's question says how many jobs it moves:
the script reads it from ``GET /bulk/<verb>/count`` (a dry run) before it asks. A refused verb
answers the CLI's code, cause and fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from workhorse.app import App
from workhorse.dashboard.security import DashboardRefusal, Guard, text_fields
from workhorse.errors import WorkhorseError
from workhorse.types import BulkResult

MAX_FORM = 16_384  # bytes an action's form may carry (a few short fields)
JOB_VERBS = {
    "cancel": ("Cancel", "Cancel job {id}? A running job loses its claim at once.", "cancelled"),
    "requeue": ("Requeue", "Requeue job {id}? It runs again from its first attempt.", "requeued"),
    "promote": ("Promote", "Promote job {id}? It becomes due now.", "promoted"),
    "remove": ("Remove", "Remove job {id} and its steps? This cannot be undone.", "removed"),
}
BULK_VERBS = {"requeue": "Requeue", "cancel": "Cancel", "promote": "Promote"}
QUEUE_VERBS = {"pause": "Pause", "resume": "Resume"}


def too_large(size: str) -> DashboardRefusal:
    return DashboardRefusal(
        413,
        f"an action's form of {size} bytes; the dashboard reads at most {MAX_FORM:,}",
        "use the page's buttons",
        code="DASHBOARD_FORM_TOO_LARGE",
    )


async def read_form(request: Request) -> bytes:
    """The body of an action, at most MAX_FORM bytes: a ``Content-Length`` above it is refused
    before anything is read, and a body without one (chunked) is read only until it passes it."""
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > MAX_FORM:
        raise too_large(f"{int(declared):,}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise too_large(f"more than {MAX_FORM:,}")
    return bytes(body)


def bulk_question(verb: str, state: str, narrowed: Mapping[str, str | None], counted: BulkResult) -> str:
    """What a bulk verb asks before it acts, with the count a dry run found (script or none)."""
    scope = ", ".join(f"{k} {v!r}" for k, v in narrowed.items() if v) or "every queue"
    return (
        f"{BULK_VERBS[verb]} {counted.affected:,} {state} jobs ({scope})? "
        f"{counted.remaining:,} more would remain for another click (at most 1,000 a click)."
    )


class Pages(Protocol):
    """What the actions need of the dashboard (``workhorse.dashboard.web.Dashboard``)."""

    app: App
    guard: Guard
    read_only: bool

    def base(self, request: Request) -> str: ...

    def url(self, request: Request, path: str, query: Mapping[str, Any] | None = None) -> str: ...

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse: ...

    def refusal(self, request: Request, error: WorkhorseError, **context: Any) -> HTMLResponse: ...


class Actions:
    """The POST routes of one dashboard."""

    def __init__(self, dashboard: Pages) -> None:
        self.dashboard = dashboard

    async def _form(self, request: Request) -> dict[str, str]:
        """The checked form: read-only, origin and CSRF refusals come before anything is read
        from the database or done."""
        if self.dashboard.read_only:
            raise DashboardRefusal(
                403,
                "this dashboard is read-only: it shows the queue and changes nothing",
                "use the CLI (workhorse requeue ID, ...) or serve a dashboard without --read-only",
                code="DASHBOARD_READ_ONLY",
            )
        body = await read_form(request)
        form = dict(text_fields(body, "form"))
        self.dashboard.guard.check_post(request.headers, form.get("csrf"))
        return form

    def _confirm(self, request: Request, form: dict[str, str], question: str, label: str, **extra: Any) -> Response:
        fields = {k: v for k, v in form.items() if k not in ("csrf", "confirm")}
        return self.dashboard.render(
            request,
            "confirm.html",
            page="confirm",
            question=question,
            label=label,
            fields=fields,
            action=request.url.path,
            **extra,
        )

    def _back(self, request: Request, form: dict[str, str], default: str, **query: Any) -> Response:
        """303 to the form's ``next`` when it is a page of this dashboard, else to ``default``."""
        base = self.dashboard.base(request)
        target = form.get("next", "")
        path = target.split("?", 1)[0]
        local = target.startswith(base + "/") and not target.startswith("//") and "\\" not in target and ":" not in path
        where = target if local else self.dashboard.url(request, default)
        if query:
            joiner = "&" if "?" in where else "?"
            where += joiner + "&".join(f"{k}={v}" for k, v in query.items())
        return RedirectResponse(where, status_code=303)

    async def job(self, request: Request) -> Response:
        verb = request.path_params["verb"]
        job_id = request.path_params["job_id"]
        try:
            form = await self._form(request)
            if verb not in JOB_VERBS:
                raise DashboardRefusal(
                    404, f"no action {verb!r} on a job", "use the job page's buttons", code="DASHBOARD_NOT_FOUND"
                )
            label, question, notice = JOB_VERBS[verb]
            from_step = form.get("from_step") or None
            if verb == "requeue" and from_step is not None:
                question = f"Requeue job {job_id} from step {from_step!r}? That step and every later one run again."
            if form.get("confirm") != "yes":
                return self._confirm(request, form, question.format(id=job_id), label)
            admin = self.dashboard.app.admin
            if verb == "cancel":
                await admin.cancel(job_id)
            elif verb == "requeue":
                await admin.requeue(job_id, from_step=from_step)
            elif verb == "promote":
                await admin.promote(job_id)
            else:
                await admin.remove(job_id)
        except WorkhorseError as error:
            return self.dashboard.refusal(
                request, error, page="jobs", back=self.dashboard.url(request, f"/jobs/{job_id}")
            )
        if verb == "remove":
            return RedirectResponse(self.dashboard.url(request, "/jobs", {"notice": notice}), status_code=303)
        return RedirectResponse(self.dashboard.url(request, f"/jobs/{job_id}", {"notice": notice}), status_code=303)

    async def bulk(self, request: Request) -> Response:
        verb = request.path_params["verb"]
        try:
            form = await self._form(request)
            if verb not in BULK_VERBS:
                raise DashboardRefusal(
                    404, f"no bulk action {verb!r}", "use the jobs page's buttons", code="DASHBOARD_NOT_FOUND"
                )
            narrowed = {k: form.get(k) or None for k in ("queue", "name", "tenant")}
            state = form.get("state", "")
            admin = self.dashboard.app.admin
            queue, name, tenant = narrowed["queue"], narrowed["name"], narrowed["tenant"]

            async def run(*, dry_run: bool = False) -> BulkResult:
                many = {"requeue": admin.requeue_many, "cancel": admin.cancel_many}.get(verb, admin.promote_many)
                return await many(state=state, queue=queue, name=name, tenant=tenant, dry_run=dry_run)

            if form.get("confirm") != "yes":
                counted = await run(dry_run=True)  # refusals show before the confirm
                question = bulk_question(verb, state, narrowed, counted)
                return self._confirm(request, form, question, BULK_VERBS[verb], counted=counted)
            done = await run()
        except WorkhorseError as error:
            return self.dashboard.refusal(request, error, page="jobs", back=self.dashboard.url(request, "/jobs"))
        query = {"state": state, **{k: v for k, v in narrowed.items() if v}}
        query.update(notice="bulk", verb=verb, affected=str(done.affected), remaining=str(done.remaining))
        return RedirectResponse(self.dashboard.url(request, "/jobs", query), status_code=303)

    async def bulk_count(self, request: Request) -> Response:
        """``GET /bulk/<verb>/count?state=&queue=&name=&tenant=``: what the bulk verb would move now
        (a dry run, nothing changed) and the question to ask, as JSON for the page's script."""
        verb = request.path_params["verb"]
        params = request.query_params
        narrowed = {k: params.get(k) or None for k in ("queue", "name", "tenant")}
        state = params.get("state", "")
        admin = self.dashboard.app.admin
        try:
            if verb not in BULK_VERBS:
                raise DashboardRefusal(
                    404, f"no bulk action {verb!r}", "use the jobs page's buttons", code="DASHBOARD_NOT_FOUND"
                )
            many = {"requeue": admin.requeue_many, "cancel": admin.cancel_many}.get(verb, admin.promote_many)
            queue, name, tenant = narrowed["queue"], narrowed["name"], narrowed["tenant"]
            counted = await many(state=state, queue=queue, name=name, tenant=tenant, dry_run=True)
        except WorkhorseError as error:
            return JSONResponse({"error": error.to_dict()}, status_code=400)
        question = bulk_question(verb, state, narrowed, counted)
        return JSONResponse({"affected": counted.affected, "remaining": counted.remaining, "question": question})

    async def queue(self, request: Request) -> Response:
        verb = request.path_params["verb"]
        try:
            form = await self._form(request)
            if verb not in QUEUE_VERBS:
                raise DashboardRefusal(
                    404, f"no queue action {verb!r}", "use the overview's buttons", code="DASHBOARD_NOT_FOUND"
                )
            queue = form.get("queue", "")
            if form.get("confirm") != "yes":
                question = (
                    f"Pause queue {queue!r}? No worker claims from it until it is resumed; running jobs finish."
                    if verb == "pause"
                    else f"Resume queue {queue!r}? Workers claim from it again at once."
                )
                return self._confirm(request, form, question, QUEUE_VERBS[verb])
            admin = self.dashboard.app.admin
            if verb == "pause":
                await admin.pause(queue, reason=form.get("reason") or "paused from the dashboard")
                notice = "paused"
            else:
                notice = "resumed" if await admin.resume(queue) else "not-paused"
        except WorkhorseError as error:
            return self.dashboard.refusal(request, error, page="overview", back=self.dashboard.url(request, "/"))
        return self._back(request, form, "/", notice=notice)
