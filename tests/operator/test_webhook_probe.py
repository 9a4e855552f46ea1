"""The health endpoint's `webhook` probe: ready only once the admission webhook accepts
connections, so a Pod is not put behind the webhook Service before kopf's server listens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest
from updatestream_operator import config
from updatestream_operator.handlers import webhook_listening


@pytest.fixture
def restore_config() -> Iterator[None]:
    before = config.current()
    yield
    config.configure(before)


def webhook_on(port: int, address: str = "0.0.0.0") -> None:
    config.configure(
        config.OperatorConfig(
            webhook=config.WebhookSettings(
                port=port, cert_file=Path("tls.crt"), key_file=Path("tls.key"), address=address
            )
        )
    )


def test_without_a_webhook_the_probe_says_off(restore_config: None) -> None:
    config.configure(config.OperatorConfig())
    assert webhook_listening() == "off"


def test_the_probe_fails_until_the_webhook_listens_and_passes_after(restore_config: None) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        webhook_on(port)  # bound, not listening: a connection is refused
        with pytest.raises(kopf.PermanentError, match=rf"not listening on 127.0.0.1:{port}"):
            webhook_listening()
        server.listen()
        assert webhook_listening() == "listening"
        webhook_on(port, address="127.0.0.1")
        assert webhook_listening() == "listening"
