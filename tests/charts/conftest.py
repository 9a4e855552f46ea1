"""Fixtures for the chart tests: the built helm, rendered manifests, the real test API server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kube import KubeApi, KubeTools, ensure_kube_tools, shared_kube_api

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "updatestream-operator"
FULL_VALUES = CHART / "ci" / "full-values.yaml"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the binaries (helm, kubectl, the API server) before the first chart test.

    A cold build takes far longer than a test's timeout; later runs only compare a hash.
    """
    if not any(Path(str(item.path)).is_relative_to(Path(__file__).parent) for item in items):
        return
    capture = config.pluginmanager.getplugin("capturemanager")

    def echo(line: str) -> None:
        if capture is None:
            print(line, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(line, flush=True)

    ensure_kube_tools(echo=echo)


@dataclass(frozen=True)
class Helm:
    """The built helm, with its caches and config kept in a temporary directory."""

    binary: Path
    home: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        result = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=env, timeout=120
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args[:2])} failed with exit {result.returncode}:\n"
                f"{result.stderr}{result.stdout[-2000:]}"
            )
        return result

    def template(
        self, *args: str, release: str = "us", namespace: str = "updatestream"
    ) -> list[dict[str, Any]]:
        """`helm template` of the chart, parsed into its documents (empty ones dropped)."""
        output = self.run("template", release, str(CHART), "--namespace", namespace, *args)
        return [doc for doc in yaml.safe_load_all(output.stdout) if doc]


@pytest.fixture(scope="session")
def kube_tools() -> KubeTools:
    return ensure_kube_tools()


@pytest.fixture(scope="session")
def helm(kube_tools: KubeTools, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(kube_tools.helm, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def kube_api(kube_tools: KubeTools) -> Iterator[KubeApi]:
    """The session's API server (shared with the operator tests when both run)."""
    api = shared_kube_api()
    yield api
    api.stop()


@pytest.fixture(scope="session")
def default_manifests(helm: Helm) -> list[dict[str, Any]]:
    return helm.template()


@pytest.fixture(scope="session")
def full_manifests(helm: Helm) -> list[dict[str, Any]]:
    return helm.template("--values", str(FULL_VALUES))
