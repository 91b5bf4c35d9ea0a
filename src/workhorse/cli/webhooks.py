"""``webhooks``: the endpoints (``ls``), an endpoint's delivery ledger (``deliveries``), and the
operator's switches (``enable``, ``disable``). No command prints a secret."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from workhorse.cli.main import State, json_option, pass_state, run_with_app
from workhorse.cli.output import ago, emit_json, stdout, styled, trim
from workhorse.webhooks.records import DeliveryPage, Endpoint, EndpointPage

STATUS_STYLES = {
    "delivered": "green",
    "failed": "red",
    "throttled": "yellow",
    "gone": "bold red",
    "refused": "bold red",
    "skipped": "dim",
}


@click.group("webhooks", short_help="Webhook endpoints and their delivery ledger.")
def webhooks() -> None:
    """Webhook endpoints and their delivery ledger (workhorse.webhooks).

    \b
    Examples:
      workhorse webhooks ls
      workhorse webhooks deliveries 6f1c...-... --limit 20
      workhorse webhooks enable 6f1c...-...
    """


@webhooks.command("ls")
@click.option("--tenant", metavar="TENANT", help="Only this tenant's endpoints.")
@click.option("--limit", type=int, default=100, show_default=True, help="Endpoints per page (at most 200).")
@click.option("--after", metavar="CURSOR", help="The page after this cursor: a page's `next`.")
@json_option
@pass_state
def ls(state: State, *, tenant: str | None, limit: int, after: str | None, as_json: bool) -> None:
    """List endpoints: id, tenant, URL, events, enabled, consecutive failures."""
    page: EndpointPage = run_with_app(
        state.app(), lambda app: app.webhooks.endpoints(tenant=tenant, limit=limit, after=after)
    )
    if as_json:
        emit_json(page.to_dict())
        return
    console = stdout()
    if not page.endpoints:
        console.print("no webhook endpoints")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "tenant", "url", "events", "state", "failures"):
        table.add_column(column, no_wrap=column == "id", overflow="fold")
    for e in page.endpoints:
        table.add_row(
            e.id, e.tenant or "-", e.url, ", ".join(e.events) if e.events else "(all)", _state(e),
            str(e.consecutive_failures),
        )  # fmt: skip
    console.print(table)
    if page.next:
        console.print(Text(f"next page: workhorse webhooks ls --after {page.next}", style="dim"))


@webhooks.command("deliveries")
@click.argument("endpoint_id")
@click.option("--limit", type=int, default=50, show_default=True, help="Attempts per page (at most 200).")
@click.option("--after", metavar="CURSOR", help="The page of older attempts after this cursor: a page's `next`.")
@json_option
@pass_state
def deliveries(state: State, *, endpoint_id: str, limit: int, after: str | None, as_json: bool) -> None:
    """An endpoint's delivery ledger, newest first: one row per attempt, its status, response
    code, latency and a bounded excerpt of the answer."""
    page: DeliveryPage = run_with_app(
        state.app(), lambda app: app.webhooks.deliveries(endpoint_id, limit=limit, after=after)
    )
    if as_json:
        emit_json(page.to_dict())
        return
    console = stdout()
    if not page.deliveries:
        console.print("no deliveries recorded for this endpoint")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "when", "event", "attempt", "status", "code", "ms", "detail"):
        table.add_column(column, no_wrap=column in ("id", "status"), overflow="fold")
    for d in page.deliveries:
        detail = d.error or d.response_excerpt or ""
        table.add_row(
            str(d.id), ago(d.created_at), d.event, str(d.attempt), styled(d.status, STATUS_STYLES.get(d.status, "")),
            "-" if d.response_code is None else str(d.response_code),
            "-" if d.latency_ms is None else f"{d.latency_ms:.0f}", trim(detail, 60),
        )  # fmt: skip
    console.print(table)
    if page.next:
        console.print(Text(f"next page: workhorse webhooks deliveries {endpoint_id} --after {page.next}", style="dim"))


@webhooks.command("enable")
@click.argument("endpoint_id")
@json_option
@pass_state
def enable(state: State, *, endpoint_id: str, as_json: bool) -> None:
    """Re-enable an endpoint (its failure count starts again at 0). Never done automatically."""
    endpoint: Endpoint = run_with_app(state.app(), lambda app: app.webhooks.enable(endpoint_id))
    _said(endpoint, "enabled", as_json=as_json)


@webhooks.command("disable")
@click.argument("endpoint_id")
@click.option("--reason", default="disabled by an operator", show_default=True, help="Recorded on the endpoint.")
@json_option
@pass_state
def disable(state: State, *, endpoint_id: str, reason: str, as_json: bool) -> None:
    """Disable an endpoint: deliveries check before every request and send nothing."""
    endpoint: Endpoint = run_with_app(state.app(), lambda app: app.webhooks.disable(endpoint_id, reason=reason))
    _said(endpoint, "disabled", as_json=as_json)


def _state(e: Endpoint) -> Text:
    if e.enabled:
        return styled("enabled", "green")
    return styled(f"disabled: {e.disabled_reason or '-'}", "red")


def _said(endpoint: Endpoint, verb: str, *, as_json: bool) -> None:
    if as_json:
        emit_json({"endpoint": endpoint.to_dict()})
        return
    stdout().print(Text.assemble(f"endpoint {endpoint.id} ", (verb, "bold"), f" ({endpoint.url})"))


COMMANDS = (webhooks,)
