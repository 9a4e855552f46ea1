"""`JobConfig`: everything one streaming job is started with, in one typed file.

The operator builds it for each launch (the UpdateStream with `spec.start` rewritten to where
this launch starts, the Keyspace, the key range, the dedup filter of the hops the job starts
after, and the paths of the launch) and writes it with `dump()`; the job reads it with
`load()`. A local run (`updatestream run --stream ... --keyspace ...`) builds the same object
from its flags. Credentials are never part of it: sinks and shards name Secrets, read from files
under `secrets_dir` where the job runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from updatestream.core.keyrange import KeyRange
from updatestream.spec import (
    Keyspace,
    SpecError,
    UpdateStream,
    describe_validation_error,
    load_manifest,
)
from updatestream.spec_values import DedupValue, KeyRangeValue

JOB_FILE = "job.yaml"
SNAPSHOT_REQUESTS_FILE = "snapshot-requests.jsonl"  # beside it: the requests the job polls


class JobConfig(BaseModel):
    """One job: one key range of one UpdateStream (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    stream: UpdateStream
    keyspace: Keyspace
    # None: the stream's only key range
    key_range: KeyRangeValue | None = Field(None, alias="keyRange")
    secrets_dir: Path = Field(alias="secretsDir")  # <dir>/<secret>/username, password
    checkpoint: Path  # Spark's checkpoint: restarting with it resumes exactly
    status_file: Path | None = Field(None, alias="statusFile")  # the progress report
    metrics_port: int | None = Field(None, ge=0, le=65535, alias="metricsPort")  # 0: any free
    metrics_host: str = Field("127.0.0.1", alias="metricsHost")  # 0.0.0.0 in a cluster
    master: str | None = None  # default: local[*], unless running under spark-submit
    # the micro-batch interval: short, since an idle trigger costs one RPC to the source and a
    # small batch's rows come from the driver's binlog tails (the `tail` source option)
    trigger_seconds: float = Field(0.1, gt=0, alias="triggerSeconds")
    available_now: bool = Field(False, alias="availableNow")  # read what there is, then stop
    timeout: float | None = Field(None, gt=0)  # stop after this many seconds
    dedup: DedupValue | None = None  # the dedup rule of the hops this job starts after
    hop_started_at: float | None = Field(None, alias="hopStartedAt")  # when that hop began
    source_options: dict[str, str] = Field(default_factory=dict, alias="sourceOptions")
    # where the running job re-reads its Keyspace to follow serving-map changes and hop: a
    # manifest path or kubernetes:<namespace>/<name>; None: no in-job hops
    keyspace_watch: str | None = Field(None, alias="keyspaceWatch")
    # the file of snapshot-on-demand requests the running job polls (JSON lines of the stream's
    # `snapshotRequests`, rewritten by the operator when they change); None: no such file
    snapshot_requests: str | None = Field(None, alias="snapshotRequests")

    @property
    def name(self) -> str:
        return self.stream.metadata.name

    def serving_key_range(self) -> KeyRange:
        """The key range this job serves; refuses one the stream does not have."""
        ranges = self.stream.spec.key_ranges
        listed = ", ".join(map(str, ranges))
        if self.key_range is not None:
            if self.key_range not in ranges:
                raise SpecError(
                    f"key range {self.key_range} is not one of stream {self.name}'s key ranges "
                    f"({listed})"
                )
            return self.key_range
        if len(ranges) != 1:
            raise SpecError(
                f"stream {self.name} has key ranges {listed}; one job serves one of them: "
                "pass --key-range"
            )
        return ranges[0]

    def dump(self) -> str:
        return yaml.safe_dump(
            self.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False
        )

    @classmethod
    def parse(cls, data: Any, *, source: str) -> JobConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(
                f"invalid job configuration in {source}: {describe_validation_error(exc)}"
            ) from None

    @classmethod
    def load(cls, path: Path) -> JobConfig:
        """Read a file written by `dump()` (YAML, or JSON), with errors naming the file."""
        return cls.parse(load_manifest(path), source=str(path))
