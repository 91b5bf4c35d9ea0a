"""A typed example that mypy --strict checks (tests/typing/test_mypy_infers_payloads.py): enqueue's
payload type comes from the body's annotation. Lines marked WRONG must be errors; nothing else."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from pydantic import BaseModel

from workhorse import App, JobContext

app = App(driver="memory")


class Signup(BaseModel):
    org_id: str
    email: str


@dataclasses.dataclass
class Resize:
    path: str
    width: int


class Ping(TypedDict):
    host: str


@app.job(tenant=lambda p: p.org_id)
async def welcome(ctx: JobContext, payload: Signup) -> int:
    return len(payload.email)


@app.job(tenant="none")
def resize(ctx: JobContext, payload: Resize) -> None:
    return None


@app.job(tenant="none")
async def ping(ctx: JobContext, payload: Ping) -> str:
    return payload["host"]


@app.job(tenant="none")
async def loose(ctx: JobContext, payload: dict[str, Any]) -> None:
    return None


async def main() -> None:
    await welcome.enqueue(Signup(org_id="o1", email="a@example.com"))
    await welcome.enqueue_many([Signup(org_id="o1", email="a@example.com")])
    resize.enqueue_sync(Resize("a.png", 100))
    await ping.enqueue({"host": "example.com"})
    await loose.enqueue({"anything": [1, 2]})
    await welcome.enqueue(Resize("a.png", 100))  # WRONG
    resize.enqueue_sync({"path": 1})  # WRONG
    await ping.enqueue({"host": 5})  # WRONG
    await welcome.enqueue_many([{"org_id": "o1"}])  # WRONG
