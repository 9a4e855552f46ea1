"""`updatestream verify --sink cdcv2` against files written by the real CDCv2 sink from the real
change events of a traffic run; then with a row's multiplicity raised and with a batch missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink

from tests.verify.conftest import Scenario
from tests.verify.streams import Run, batches, feed, verify
from updatestream import spec
from updatestream.cdcv2 import Collection, Progress, Update, read_directory
from updatestream.cdcv2.format import batch_file_name, batch_id_of, encode, read_file, stream_files


@pytest.fixture(scope="module")
def cdc_root(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cdc")
    sink = CDCv2Sink(spec.CDCv2Sink.model_validate({"type": "cdcv2", "path": str(root)}))
    feed(sink, batches(scenario.events))
    return root


def copy_of(root: Path, tmp_path: Path) -> Path:
    target = tmp_path / "cdc"
    shutil.copytree(root, target)
    return target / "verify" / "range=-"


def run(scenario: Scenario, path: Path) -> Run:
    return verify("--ledger", scenario.ledger_path, "--sink", "cdcv2", "--path", path, "--json")


def test_clean_files(scenario: Scenario, cdc_root: Path) -> None:
    result = run(scenario, cdc_root)
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert report["committed"] == len(scenario.ledger)
    assert report["delivered"] > len(scenario.ledger) // 2
    assert (report["lost"], report["duplicates_delivered"], report["out_of_order_keys"]) == (
        0,
        0,
        0,
    )


def test_row_counted_twice_is_a_duplicate(
    scenario: Scenario, cdc_root: Path, tmp_path: Path
) -> None:
    directory = copy_of(cdc_root, tmp_path)
    collection = Collection()
    for completed in read_directory(directory):
        collection.apply(completed)
    pk, live = next(iter(collection.tables()["users"].items()))
    upper = max(
        s.upper
        for f in stream_files(directory)
        for s in read_file(f)
        if isinstance(s, Progress) and s.upper is not None
    )
    last = max(b for b in map(batch_id_of, stream_files(directory)) if b is not None)
    datum = {"table": "users", "pk": json.loads(pk), "row": live}
    lines = [encode(Update(datum, upper, 1)), encode(Progress(upper, upper + 1, ((upper, 1),)))]
    (directory / batch_file_name(last + 1)).write_text("\n".join(lines) + "\n")
    result = run(scenario, tmp_path / "cdc")
    assert result.returncode == 1
    report = result.json()
    assert (report["lost"], report["duplicates_delivered"]) == (0, 1)


def test_missing_batch_loses_changes(scenario: Scenario, cdc_root: Path, tmp_path: Path) -> None:
    directory = copy_of(cdc_root, tmp_path)
    with_updates = [
        f for f in stream_files(directory) if any(isinstance(s, Update) for s in read_file(f))
    ]
    # How the writer groups updates into batch files depends on the traffic's timing; losing
    # any file that holds updates must show as a loss.
    assert with_updates
    with_updates[0].unlink()
    result = run(scenario, directory)
    assert result.returncode == 1
    assert result.json()["lost"] > 0


def test_duplicates_dropped_come_from_the_status_file(
    scenario: Scenario, cdc_root: Path, tmp_path: Path
) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"stream": "verify", "duplicates": {"hop": 4, "replay": 1}}))
    result = verify(
        "--ledger", scenario.ledger_path, "--sink", "cdcv2", "--path", cdc_root,
        "--status-file", status, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert report["duplicates_dropped"] == 5
    assert report["duplicates_dropped_by_cause"] == {"hop": 4, "replay": 1}
    status.write_text(json.dumps({"stream": "verify", "shards": {}}))  # no key: none counted
    result = verify(
        "--ledger", scenario.ledger_path, "--sink", "cdcv2", "--path", cdc_root,
        "--status-file", status, "--json",
    )  # fmt: skip
    assert (result.json()["duplicates_dropped"], result.returncode) == (0, 0)


def rewrite(path: Path, statements: list[Update | Progress]) -> None:
    path.write_text("".join(encode(s) + "\n" for s in statements))


def test_clean_files_have_true_progress_statements(scenario: Scenario, cdc_root: Path) -> None:
    report = run(scenario, cdc_root).json()
    assert report["progress_violations"] == 0


def test_an_update_written_after_its_second_was_declared_complete_is_a_violation(
    scenario: Scenario, cdc_root: Path, tmp_path: Path
) -> None:
    """A change whose second a progress statement declared complete, written later at a later
    time (as a writer that trusted an absent shard to be retired would): the final state and
    the counts agree, but the ledger shows the progress statement was false."""
    directory = copy_of(cdc_root, tmp_path)
    files = stream_files(directory)
    victim = next(
        f for f in files if any(isinstance(s, Update) and s.diff > 0 for s in read_file(f))
    )
    statements = list(read_file(victim))
    moved = next(s for s in statements if isinstance(s, Update) and s.diff > 0)
    kept: list[Update | Progress] = []
    for statement in statements:
        if statement is moved:
            continue
        if isinstance(statement, Progress):
            counts = tuple(
                (t, c - 1 if t == moved.time else c)
                for t, c in statement.counts
                if not (t == moved.time and c == 1)
            )
            statement = Progress(statement.lower, statement.upper, counts)
        kept.append(statement)
    rewrite(victim, kept)
    upper = max(s.upper for f in files for s in read_file(f) if isinstance(s, Progress) and s.upper)
    last = max(b for b in map(batch_id_of, files) if b is not None)
    late = Update(moved.data, upper, moved.diff)
    rewrite(
        directory / batch_file_name(last + 1), [late, Progress(upper, upper + 1, ((upper, 1),))]
    )

    result = run(scenario, directory)
    assert result.returncode == 1
    report = result.json()
    assert (report["lost"], report["duplicates_delivered"]) == (0, 0)
    assert report["progress_violations"] == 1


def test_a_declared_count_that_does_not_match_the_updates_is_a_violation(
    scenario: Scenario, cdc_root: Path, tmp_path: Path
) -> None:
    directory = copy_of(cdc_root, tmp_path)
    victim = next(
        f
        for f in stream_files(directory)
        if any(isinstance(s, Progress) and s.counts for s in read_file(f))
    )
    statements = [
        Progress(s.lower, s.upper, tuple((t, c + 1) for t, c in s.counts[:1]) + s.counts[1:])
        if isinstance(s, Progress)
        else s
        for s in read_file(victim)
    ]
    rewrite(victim, statements)
    result = run(scenario, directory)
    assert result.returncode == 1
    assert result.json()["progress_violations"] == 1
