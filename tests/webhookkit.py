"""A real HTTP receiver on 127.0.0.1 for the webhook tests: answers from a script, records every
request it got (headers and raw body)."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workhorse import Retry
from workhorse.webhooks import WebhookPolicy

# Deliveries to this receiver: 127.0.0.1 over http, fast retries, a short timeout.
POLICY = WebhookPolicy(
    allow_private=True, allow_http=True, disable_after=4, timeout="3s", retry=Retry(attempts=3, base=0, jitter=False)
)


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.default = Reply()
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def next_reply(self) -> Reply:
        with self.lock:
            return self.script.pop(0) if self.script else self.default


@contextmanager
def serving(tls: tuple[str, str] | None = None) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1; with ``tls=(certfile, keyfile)``, over https."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # headers and body leave at once, not after a delayed ACK (40 ms)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            reply = receiver.next_reply()
            if reply.delay:
                time.sleep(reply.delay)
            if any(name.lower() == "date" for name in reply.headers):
                self.send_response_only(reply.status)  # the script's Date, not the server's own
            else:
                self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: object) -> None:
            return

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            return  # a client that hung up mid-answer (a timeout, a cancel) is what some tests do

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
