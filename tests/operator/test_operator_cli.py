"""`updatestream operator` refuses options it could not run with, before starting: a `--liveness`
URL kopf could not serve, a webhook without its certificate, a launcher it does not have."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from updatestream_operator.cli import operator_command


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://0.0.0.0:8081/healthz", "is not an http://HOST:PORT/PATH URL"),
        ("http://0.0.0.0/healthz", "is not an http://HOST:PORT/PATH URL"),
        ("http://0.0.0.0:80x/healthz", "is not an http://HOST:PORT/PATH URL"),
        ("http://0.0.0.0:9090/healthz", "which --metrics-port serves"),
    ],
)
def test_a_liveness_url_kopf_cannot_serve_is_refused(url: str, says: str) -> None:
    result = CliRunner().invoke(operator_command, ["--metrics-port", "9090", "--liveness", url])
    assert result.exit_code == 2, result.output
    assert says in result.output and "--liveness" in result.output


def test_a_liveness_url_is_parsed() -> None:
    context = operator_command.make_context(
        "operator", ["--liveness=http://0.0.0.0:8081/healthz", "--metrics-port=9090"]
    )
    assert context.params["liveness"] == "http://0.0.0.0:8081/healthz"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--webhook-port", "9443"], "give --webhook-cert-dir with tls.crt and tls.key"),
        (["--webhook-cert-dir", "."], "--webhook-cert-dir needs --webhook-port"),
        (["--webhook-port", "9443", "--webhook-cert-dir", "."], "mount the webhook's TLS Secret"),
        (["--webhook-port", "70000"], "70000 is not in the range 1<=x<=65535"),
    ],
)
def test_a_webhook_without_its_certificate_is_refused(
    args: list[str], says: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    empty = tmp_path_factory.mktemp("no-certificate")
    args = [str(empty) if a == "." else a for a in args]
    result = CliRunner().invoke(operator_command, ["--metrics-port", "0", *args])
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.mark.parametrize(
    ("launcher", "says"),
    [
        ("spark-operator", "the spark-operator launcher was removed"),
        ("yarn", "'yarn' is not a launcher; choose one of local, spark-submit"),
    ],
)
def test_a_launcher_the_operator_does_not_have_is_refused(launcher: str, says: str) -> None:
    result = CliRunner().invoke(operator_command, ["--launcher", launcher])
    assert result.exit_code == 2, result.output
    assert says in result.output and "--launcher" in result.output


@pytest.mark.parametrize("launcher", ["local", "spark-submit"])
def test_each_launcher_is_accepted(launcher: str) -> None:
    context = operator_command.make_context("operator", ["--launcher", launcher])
    assert context.params["launcher"] == launcher
