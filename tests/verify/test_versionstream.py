"""`updatestream verify --sink versionstream` against a real Version Stream table fed with the
real change events of a traffic run; then with one version deleted, one duplicated, two
swapped, and with wrong credentials."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from harness.accounts import write_secret
from tests.conftest import MariaDBFixture
from tests.verify.conftest import Scenario
from tests.verify.streams import Run, batches, feed, verify
from updatestream import spec

DATABASE = "verify_vs"
SECRET = "changelog-writer"


@pytest.fixture(scope="module")
def changelog(
    scenario: Scenario, mariadb_server: MariaDBFixture, tmp_path_factory: pytest.TempPathFactory
) -> tuple[MariaDBFixture, Path]:
    """Streams 1-4 of one table, each holding the whole run (batch 1 written twice)."""
    secrets = tmp_path_factory.mktemp("vs-secrets")
    mariadb_server.admin_secret(secrets, SECRET)
    for stream in (1, 2, 3, 4):
        config = spec.VersionStreamSink.model_validate(
            {
                "type": "versionStream",
                "mysql": {"host": mariadb_server.host, "port": mariadb_server.port},
                "credentialsSecret": {"name": SECRET},
                "database": DATABASE,
                "stream": stream,
            }
        )
        sink = VersionStreamSink(config, secrets_dir=secrets)
        feed(sink, batches(scenario.events))
    return mariadb_server, secrets


def run(scenario: Scenario, server: MariaDBFixture, secrets: Path, stream: int, *more: str) -> Run:
    return verify(
        "--ledger", scenario.ledger_path, "--sink", "versionstream",
        "--mysql", f"{server.host}:{server.port}", "--secrets-dir", secrets, "--secret", SECRET,
        "--database", DATABASE, "--stream", str(stream), *more,
    )  # fmt: skip


def test_clean_stream(scenario: Scenario, changelog: tuple[MariaDBFixture, Path]) -> None:
    result = run(scenario, *changelog, 1, "--json")
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert len(scenario.ledger) > 200
    assert report == {
        "committed": len(scenario.ledger),
        "delivered": len(scenario.ledger),
        "lost": 0,
        "duplicates_delivered": 0,
        "duplicates_dropped": 0,
        "duplicates_dropped_by_cause": {},
        "out_of_order_keys": 0,
    }
    human = run(scenario, *changelog, 1)
    assert human.returncode == 0
    assert "OK" in human.stdout and "lost" in human.stdout


def test_deleted_version_is_lost(
    scenario: Scenario, changelog: tuple[MariaDBFixture, Path]
) -> None:
    server, secrets = changelog
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM versionstream WHERE stream = 2 AND version = 17")
        assert cur.rowcount == 1
        conn.commit()
    result = run(scenario, server, secrets, 2, "--json")
    assert result.returncode == 1
    report = result.json()
    assert (report["lost"], report["duplicates_delivered"]) == (1, 0)
    assert report["delivered"] == len(scenario.ledger) - 1


def test_duplicate_version(scenario: Scenario, changelog: tuple[MariaDBFixture, Path]) -> None:
    server, secrets = changelog
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO versionstream (stream, version, entity, data, origin, origin_hash) "
            "SELECT stream, (SELECT MAX(version) + 1 FROM versionstream WHERE stream = 3), "
            "entity, data, origin, NULL FROM versionstream WHERE stream = 3 AND version = 5"
        )
        conn.commit()
    result = run(scenario, server, secrets, 3, "--json")
    assert result.returncode == 1
    report = result.json()
    assert (report["lost"], report["duplicates_delivered"]) == (0, 1)


def test_swapped_versions_are_out_of_order(
    scenario: Scenario, changelog: tuple[MariaDBFixture, Path]
) -> None:
    entity_changes = Counter((e.table, e.pk) for e in scenario.ledger)
    (table, pk), count = entity_changes.most_common(1)[0]
    assert count >= 2
    server, secrets = changelog
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT version, data, origin FROM versionstream WHERE stream = 4 AND entity = %s "
            "ORDER BY version LIMIT 2",
            (f"{table}:{pk}",),
        )
        (v1, d1, o1), (v2, d2, o2) = cur.fetchall()
        cur.execute(
            "UPDATE versionstream SET origin_hash = NULL WHERE stream = 4 AND version IN (%s, %s)",
            (v1, v2),
        )
        for version, data, origin in ((v1, d2, o2), (v2, d1, o1)):
            cur.execute(
                "UPDATE versionstream SET data = %s, origin = %s WHERE stream = 4 AND version = %s",
                (data, origin, version),
            )
        conn.commit()
    result = run(scenario, server, secrets, 4, "--json")
    report = result.json()
    assert (report["lost"], report["duplicates_delivered"]) == (0, 0)
    assert report["out_of_order_keys"] == 1
    assert result.returncode == 0  # reported; not a loss


def test_wrong_credentials(
    scenario: Scenario, changelog: tuple[MariaDBFixture, Path], tmp_path: Path
) -> None:
    server, _ = changelog
    # letters only: a port or a pid in the error text cannot hold the marker
    write_secret(tmp_path, SECRET, server.admin.username, "not-the-password-qvxzk")
    result = run(scenario, server, tmp_path, 1, "--json")
    assert result.returncode == 2
    assert "qvxzk" not in result.stdout + result.stderr
    assert server.admin.password not in result.stdout + result.stderr
    assert "refused user" in result.json()["error"]
    assert len(result.stderr.strip().splitlines()) == 1
