"""Over https: the request connects to the address the guard checked while TLS (SNI and the
certificate check) still speaks for the endpoint's name."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from webhookkit import serving
from workhorse import App
from workhorse.webhooks import wire


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


async def test_https_to_the_checked_address_verifies_the_name(
    hook_app: App, certificate: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "_ssl", ssl.create_default_context(cafile=certificate[0]))  # trust the test's CA
    with serving(tls=certificate) as receiver:
        good = await hook_app.webhooks.add_endpoint(f"https://localhost:{receiver.port}/hooks", tenant="o1")
        # The certificate names localhost, not 127.0.0.1: the same server by address must fail its check.
        bad = await hook_app.webhooks.add_endpoint(f"https://127.0.0.1:{receiver.port}/hooks", tenant="o1")
        await hook_app.webhooks.send(good.id, "ping", {})
        await hook_app.webhooks.send(bad.id, "ping", {})
        await hook_app.worker(queues=["webhooks"], handle_signals=False).run(burst=True)
        assert len(receiver.received) == 1
        assert receiver.received[0].headers["host"] == f"localhost:{receiver.port}"
    [ok] = (await hook_app.webhooks.deliveries(good.id)).deliveries
    assert (ok.status, ok.response_code) == ("delivered", 200)
    refused = (await hook_app.webhooks.deliveries(bad.id)).deliveries
    assert refused and all(d.status == "failed" and "CERTIFICATE_VERIFY_FAILED" in (d.error or "") for d in refused)
