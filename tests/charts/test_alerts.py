"""The alert rules pass `promtool check rules` and their unit tests (`promtool test rules`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.charts.conftest import CHART

RULES = CHART / "alerts" / "updatestream-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts-test.yaml")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_rule_file_passes_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in result.stdout


def test_the_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test_that_sees_it_fire() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert alerts == {
        "UpdateStreamLagHigh",
        "UpdateStreamDegraded",
        "UpdateStreamDuplicatesDelivered",
        "UpdateStreamHopSlow",
        "UpdateStreamReconcileErrors",
    }
    firing = {
        case["alertname"]
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert firing == alerts


def test_a_wrong_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: the lag alert expected at a threshold it does not reach."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [str(RULES)]
    case = tests["tests"][0]["alert_rule_test"][1]
    case["eval_time"] = "12m"  # 400s of lag for 8 minutes: not yet for the 10 minutes required
    broken = tmp_path / "alerts-test.yaml"
    broken.write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", broken.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "UpdateStreamLagHigh" in result.stdout + result.stderr
