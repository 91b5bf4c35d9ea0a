"""A half-open LISTEN session: the server stops answering but no error ever arrives (a dead peer
behind NAT, a pooler that dropped the session). Only the listener's same-session probe can tell;
it must fail within probe_timeout, and the listener must rebuild the session and hear again."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse.drivers.listener import Listener


class Blackhole:
    """A TCP proxy to the server that can go silent: bytes already sent are swallowed, nothing
    is closed, no error is raised. Connections opened after ``silence()`` pass normally."""

    def __init__(self, target: dict[str, str]) -> None:
        self.target = target
        self.silenced: list[asyncio.Event] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.target.get("host", "127.0.0.1"), int(self.target.get("port", "5432"))
        if host.startswith("/"):  # the embedded server listens on a unix socket
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        handler = asyncio.current_task()
        assert handler is not None
        self.handlers.add(handler)
        self.writers.append(writer)
        up_reader, up_writer = await self._upstream()
        self.writers.append(up_writer)
        silent = asyncio.Event()
        self.silenced.append(silent)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                if silent.is_set():
                    continue  # swallowed: the peer waits forever
                sink.write(data)
                await sink.drain()

        # Cancelled when the test's loop closes: end quietly (asyncio logs a cancelled handler).
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    def silence(self) -> None:
        for event in self.silenced:
            event.set()

    async def stop(self) -> None:
        """Close every connection it holds and end every handler, silenced ones included: left to
        the loop's teardown, their sockets are reported unclosed while the next test runs."""
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        for handler in self.handlers:
            handler.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        for writer in self.writers:
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def test_a_silent_listen_session_is_probed_dead_and_rebuilt(database_url: str, schema: str) -> None:
    target = conninfo_to_dict(database_url)
    proxy = Blackhole({k: str(v) for k, v in target.items() if v is not None})
    port = await proxy.start()
    via_proxy = make_conninfo(database_url, host="127.0.0.1", port=port)
    channel, wake = f"{schema}_jobs", asyncio.Event()
    listener = Listener(via_proxy, channel, ["q"], wake, probe_interval=0.5, probe_timeout=0.5)
    listener.start()
    try:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as notifier:

            async def heard() -> bool:
                wake.clear()
                listener.due = False
                await notifier.execute("select pg_notify(%s, 'q')", (channel,))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 2)
                return listener.due

            for _ in range(100):
                if listener.healthy:
                    break
                await asyncio.sleep(0.05)
            assert listener.healthy and await heard()

            # (Another test may kill every workhorse:listen session on the server meanwhile: count
            # from here.)
            reconnects, connections = listener.reconnects, proxy.connections
            proxy.silence()  # the session goes quiet: no error, no close
            assert not await heard(), "a silenced session cannot hear"
            # Within probe_interval + probe_timeout + the first backoff (< 0.5 s), the probe fails
            # and the listener rebuilds its session on a new connection.
            for _ in range(100):
                if listener.reconnects > reconnects and listener.healthy:
                    break
                await asyncio.sleep(0.05)
            assert listener.healthy and proxy.connections > connections
            assert await heard(), "the rebuilt session hears notifies again"
    finally:
        await listener.stop()
        await proxy.stop()
