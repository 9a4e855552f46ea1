"""Fixtures for the operator tests: a real kube-apiserver on etcd (see harness/kube.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.kube import KubeApi, ensure_kube_tools, shared_kube_api


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the binaries before the first test runs when a collected test needs them.

    A cold build takes far longer than the per-test timeout, which also covers fixture
    setup; built here it is outside any test. Later runs only compare a hash.
    """
    if not any("kube_api" in getattr(item, "fixturenames", ()) for item in items):
        return
    capture = config.pluginmanager.getplugin("capturemanager")

    def echo(line: str) -> None:
        if capture is None:  # run with `-p no:capture`
            print(line, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(line, flush=True)

    ensure_kube_tools(echo=echo)


@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeApi]:
    """A running API server; `.kubeconfig`, `.server`, `.kubectl(...)`, `.stop()`."""
    ensure_kube_tools()  # idempotent: builds the binaries if the hook above did not run
    api = shared_kube_api()
    yield api
    api.stop()
