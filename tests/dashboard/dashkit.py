"""What the dashboard tests share: an app with jobs to show, and an HTTP client on an ASGI app."""

from __future__ import annotations

import re
from typing import Any

import httpx

from workhorse import App, JobContext, TerminalError

HOST = "127.0.0.1:8000"
ORIGIN = f"http://{HOST}"
HOSTILE = '<script>window.__xss=1</script><b id="pwn">bold</b><img src=x onerror="window.__xss=2">'


def declare(app: App) -> dict[str, Any]:
    """The jobs of the tests: ``work`` dead-letters when its payload says ``fail`` (and the
    ``flip`` file's absence), else answers its payload; ``steps`` records two steps."""

    @app.job("emails.send", queue="emails", tenant=lambda p: p.get("org", "none"))
    async def work(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("fail") and not app_state["healed"]:
            raise TerminalError(payload.get("message", "provider down"))
        return {"ok": True, "echo": payload.get("message")}

    @app.job("reports.monthly", queue="reports", tenant="none")
    async def steps(ctx: JobContext, payload: dict[str, Any]) -> str:
        ctx.progress((1, 3), "fetching rows")
        first = await ctx.step.run("fetch", lambda: {"rows": 3})
        ctx.progress((2, 3), "rendering")
        await ctx.step.run("render", lambda: f"{first['rows']} rows")
        if payload.get("cool_down"):
            await ctx.step.sleep("cool-down", payload["cool_down"])
        if payload.get("wait_for"):
            await ctx.step.wait_for_event("approval", payload["wait_for"], key=payload.get("key"))
        return "done"

    @app.task("reports.nightly", cron="0 2 * * *", tenant="none", queue="reports")
    async def nightly(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    @app.task("emails.digest", every="15m", tenant="none", queue="emails")
    async def digest(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    app_state: dict[str, Any] = {"healed": False, "work": work, "steps": steps}
    return app_state


def client(asgi: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi), base_url=ORIGIN, headers=headers, follow_redirects=False
    )


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found[1]


def refusal_code(html: str) -> str | None:
    found = re.search(r'class="refusal-code">([^<]*)<', html)
    return found[1] if found else None
