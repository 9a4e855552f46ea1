"""Every benchmark updates one shared summary file without dropping the others' figures."""

import json
from pathlib import Path

from bench.summary import merge_summary


def test_merge_keeps_other_benchmarks_keys_and_overwrites_its_own(tmp_path: Path) -> None:
    path = tmp_path / "results" / "summary.json"
    merge_summary({"source_rows_per_s": 1000, "machine": "2 cores"}, path)
    merge_summary({"source_rows_per_s": 2000, "memcached_invalidations_per_s": 30000}, path)
    assert json.loads(path.read_text()) == {
        "machine": "2 cores",
        "memcached_invalidations_per_s": 30000,
        "source_rows_per_s": 2000,
    }
    assert not path.with_suffix(".json.tmp").exists()
