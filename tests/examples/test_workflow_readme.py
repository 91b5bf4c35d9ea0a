"""The durable steps example (docs/guides/steps.md) runs as written: charge, email, wait for shipment, done."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

PAGE = Path(__file__).parents[2] / "docs" / "guides" / "steps.md"


def workflow_block() -> str:
    section = PAGE.read_text()
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


async def wait_for_state(app: Any, job_id: str, state: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        job = await app.get_job(job_id)
        if job is not None and job.state == state:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} never reached {state}")


async def test_the_order_workflow_runs_as_written(database_url: str, schema: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    source = workflow_block()
    namespace: dict[str, Any] = {"__name__": "readme_workflow"}
    exec(compile(source.replace("App()", f"App(schema={schema!r})"), "steps.md", "exec"), namespace)
    app = namespace["app"]
    charges: list[str] = []
    charge_card = namespace["charge_card"]

    def counting_charge(order_id: str, cents: int) -> dict[str, Any]:
        charges.append(order_id)
        return dict(charge_card(order_id, cents))

    namespace["charge_card"] = counting_charge  # the body looks it up at call time: count the charges
    await app.migrate()
    order = {"id": "o-1", "shop": "s-1", "cents": 4200, "email": "ada@example.com"}
    ref = await namespace["fulfil_order"].enqueue(order)
    worker = app.worker(handle_signals=False)
    running = asyncio.create_task(worker.run())
    await wait_for_state(app, ref.id, "suspended")  # charged, emailed, now waiting: no worker held
    waiting = await app.get_job(ref.id)
    assert [(s["name"], s["state"]) for s in waiting.steps] == [
        ("charge", "done"),
        ("confirm", "done"),
        ("shipped", "waiting"),
    ]
    await namespace["warehouse_webhook"]("o-1", "TRACK-42")
    await wait_for_state(app, ref.id, "done")
    await worker.stop()
    await running
    job = await app.get_job(ref.id)
    assert job.result == {"charge": "ch_o-1", "shipped": True, "tracking": "TRACK-42"}
    assert job.attempt == 1 and charges == ["o-1"]  # charged once, across the suspension
    assert job.steps[1]["result"] == "sent to ada@example.com: Thanks for your order"
    await app.close()
