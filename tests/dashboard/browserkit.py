"""The browser tests' harness: the dashboard served by uvicorn on a free loopback port, with a
worker, in a thread of its own (one event loop for the server, the worker and the seeding), and
headless Chromium from Debian driven by Playwright's Python client.

Chromium or Playwright missing: the tests skip, saying how to install them (never
``playwright install``: it downloads a browser build)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from workhorse import App
from workhorse.dashboard import make_asgi_app

T = TypeVar("T")
CHROMIUM = os.environ.get("WORKHORSE_CHROMIUM", "/usr/bin/chromium")  # Debian's package puts it here
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def need_browser() -> None:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the browser tests need Playwright's Python client: pip install -e '.[dev]'")
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"the browser tests need Chromium at {CHROMIUM}: apt-get install -y chromium (Debian), "
            "or point WORKHORSE_CHROMIUM at one"
        )


class Served:
    """A dashboard on http://127.0.0.1:PORT/ and a worker, on one loop in a background thread."""

    def __init__(self, app: App, *, worker: bool = True, **dashboard: Any) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._dashboard = dashboard
        self._with_worker = worker
        self._thread = threading.Thread(target=self._main, name="dashboard-test-server", daemon=True)
        self._ready = threading.Event()
        self._server: Any = None
        self._worker: Any = None
        self._failure: BaseException | None = None

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as error:  # reported by start()/stop()
            self._failure = error
            self._ready.set()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _serve(self) -> None:
        import uvicorn

        asgi = make_asgi_app(self.app, **self._dashboard)
        config = uvicorn.Config(asgi, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        tasks = [asyncio.create_task(self._server.serve())]
        if self._with_worker:
            self._worker = self.app.worker(concurrency=4, handle_signals=False, poll_interval="200ms")
            tasks.append(asyncio.create_task(self._worker.run()))
        while not self._server.started:
            await asyncio.sleep(0.02)
        self._ready.set()
        await asyncio.gather(*tasks)
        await self.app.close()

    def start(self) -> Served:
        self._thread.start()
        self._ready.wait(60)
        if self._failure is not None:
            raise self._failure
        return self

    def call(self, work: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``work`` on the server's loop (the app's driver lives there) and answer its result."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self.loop)
        return future.result(timeout)

    def wait_for(self, check: Any, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.call(check())
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"not so within {timeout}s")

    def stop(self) -> None:
        async def shut() -> None:
            if self._worker is not None:
                await self._worker.stop(cut_off=True)
            self._server.should_exit = True

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(60)
            self._thread.join(60)
        if self._failure is not None:
            raise self._failure


@contextmanager
def browser_page(*, xss_guard: bool = True, javascript: bool = True) -> Iterator[Any]:
    """A Playwright page in headless Chromium that accepts every confirm() and records any alert
    or dialog a script of the page opened (``page.dialogs``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                viewport={"width": 1360, "height": 860}, device_scale_factor=1, java_script_enabled=javascript
            )
            page = context.new_page()
            page.set_default_timeout(30_000)
            seen: list[str] = []

            def on_dialog(dialog: Any) -> None:
                seen.append(f"{dialog.type}: {dialog.message}")
                dialog.accept()

            page.on("dialog", on_dialog)
            page.dialogs = seen  # type: ignore[attr-defined]
            if xss_guard:
                page.add_init_script("window.__xss = 0;")
            yield page
        finally:
            browser.close()
