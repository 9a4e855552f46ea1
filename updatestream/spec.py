"""The specs users declare: `Keyspace` and `UpdateStream`, as pydantic models.

The same shapes serve three places: the custom resources the operator watches, the Keyspace
manifest the development cluster writes, and the configuration a streaming job reads. Field
names are the custom resources' camelCase names.

Credentials are never inline. A shard names a Secret; the job reads the Secret's `username` and
`password` keys as files from a directory where the Secret is mounted (`<secrets_dir>/<name>/`),
the same layout Kubernetes gives a Secret volume, and the development cluster writes locally.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.spec_values import CanonicalKeyRange, KeyRangeName

API_GROUP = "updatestream.io"
API_VERSION: Final = "updatestream.io/v1alpha1"


class SpecError(UpdateStreamError):
    """A Keyspace or UpdateStream spec is malformed."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


_M = TypeVar("_M", bound=_Model)


class SecretRef(_Model):
    """A Kubernetes Secret holding `username` and `password` keys."""

    name: str = Field(min_length=1)


class MySQLEndpoint(_Model):
    host: str = Field(min_length=1)
    port: int = Field(default=3306, ge=1, le=65535)
    tls: Literal["disabled", "preferred", "required", "verify-ca", "verify-identity"] = "disabled"


class ShardSpec(_Model):
    """One shard: its key range as its name, and where its primary MySQL/MariaDB listens."""

    name: KeyRangeName
    mysql: MySQLEndpoint
    credentials_secret: SecretRef = Field(alias="credentialsSecret")
    flavor: Literal["mariadb", "mysql"] = "mariadb"


class ShardMapHistoryEntry(_Model):
    at: float
    shards: list[str]

    @property
    def shard_map(self) -> ShardMap:
        """The map that served from `at` on (raises when the shards do not partition)."""
        return ShardMap(KeyRange.parse(name) for name in self.shards)


class VitessSource(_Model):
    """A Keyspace read from a Vitess cluster: the operator takes its shards (primary tablets'
    MySQL endpoints), serving shards and VSchema from vtctld and keeps them in step."""

    vtctld: str  # vtctld's gRPC address, host:port
    cell: str = Field("zone1", min_length=1)
    keyspace: str | None = Field(None, min_length=1)  # Vitess's name; the resource's by default
    # the account the job reads every shard's binlog with
    credentials_secret: SecretRef = Field(alias="credentialsSecret")
    sync_seconds: float = Field(5.0, ge=1.0, le=3600.0, alias="syncSeconds")

    @field_validator("vtctld")
    @classmethod
    def _address(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not vtctld's gRPC address; write it as host:port")
        return value


class KeyspaceSpec(_Model):
    # With `vitess`, the operator fills in shards, VSchema and serving shards from Vitess.
    vitess: VitessSource | None = None
    shards: list[ShardSpec] = Field(default_factory=list)
    vschema: dict[str, Any] = Field(default_factory=dict)
    serving_shards: list[str] = Field(default_factory=list, alias="servingShards")
    shard_map_history: list[ShardMapHistoryEntry] = Field(
        default_factory=list, alias="shardMapHistory"
    )

    @model_validator(mode="after")
    def _declared_or_read(self) -> KeyspaceSpec:
        if self.vitess is None:
            absent = [
                name
                for name, field in (("shards", "shards"), ("servingShards", "serving_shards"))
                if not getattr(self, field)
            ] + ([] if "vschema" in self.model_fields_set else ["vschema"])
            if absent:
                raise ValueError(
                    f"{', '.join(absent)} missing: declare the shards, VSchema and serving "
                    "shards, or name a Vitess cluster to read them from (spec.vitess)"
                )
        return self

    @property
    def awaiting_vitess(self) -> bool:
        """Named a Vitess cluster whose shards the operator has not read yet."""
        return self.vitess is not None and not self.serving_shards

    @property
    def serving_map(self) -> ShardMap:
        """The serving shards as a shard map (raises when they do not partition the keyspace)."""
        return ShardMap(KeyRange.parse(name) for name in self.serving_shards)

    def shard(self, name: str) -> ShardSpec:
        for shard in self.shards:
            if shard.name == name:
                return shard
        known = ", ".join(s.name for s in self.shards)
        raise SpecError(f"shard {name!r} is not declared in the Keyspace (declared: {known})")


class ObjectMeta(_Model):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)
    name: str
    namespace: str | None = None


class Keyspace(_Model):
    api_version: Literal["updatestream.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["Keyspace"] = "Keyspace"
    metadata: ObjectMeta
    spec: KeyspaceSpec
    status: dict[str, Any] | None = None


# -- UpdateStream -------------------------------------------------------------------------------


class StartPosition(_Model):
    """Where a stream starts: exactly one of the forms.

    `resume` is written by the operator, never by users (the CRD does not accept it), when the
    shards of one launch start in different forms (after a hop: the unchanged shards from their
    last delivered tokens, the new ones from a timestamp): each shard starts from
    `tokens[shard]` if present, else `gtid[shard]`, else `timestamps[shard]` (seconds).
    """

    mode: Literal["now", "snapshot", "earliest", "timestamp", "gtid", "tokens", "resume"] = "now"
    timestamp: int | None = None
    gtid: dict[str, str] | None = None  # shard name -> GTID position
    tokens: dict[str, dict[str, Any]] | None = None  # shard name -> EventToken JSON
    timestamps: dict[str, int] | None = None  # shard name -> start timestamp (mode resume)


class MemcachedSink(_Model):
    type: Literal["memcached"]
    servers: list[str] = Field(min_length=1)  # host:port
    key_template: dict[str, str] = Field(default_factory=dict, alias="keyTemplate")
    # table -> more key templates to invalidate (composite objects keyed by part of the pk)
    extra_keys: dict[str, list[str]] = Field(default_factory=dict, alias="extraKeys")
    # invalidate as soon as the stream's binlog tail holds a change, ahead of its micro-batch
    fast_lane: bool = Field(True, alias="fastLane")
    # "driver": the job's driver invalidates each batch; "executors": every Spark task of a
    # batch invalidates its own rows' keys, in parallel (CAS keeps the newest token per key)
    write_from: Literal["driver", "executors"] = Field("driver", alias="writeFrom")


class VersionStreamSink(_Model):
    type: Literal["versionStream"]
    mysql: MySQLEndpoint
    database: str = "updatestream"
    table: str = "versionstream"
    stream: int = 0
    credentials_secret: SecretRef = Field(alias="credentialsSecret")
    # > 1: entities spread over streams stream .. stream+partitions-1, appended in parallel,
    # recombined by a stream-of-streams (updatestream.versionstream.partitioned_stream)
    partitions: int = Field(1, ge=1, le=64)


class MirrorSink(_Model):
    """An external MySQL/MariaDB database kept up to date, one mirror table per source table."""

    type: Literal["mirror"]
    mysql: MySQLEndpoint
    database: str = "mirror"  # created if missing
    credentials_secret: SecretRef = Field(alias="credentialsSecret")
    table_prefix: str = Field("", alias="tablePrefix")  # mirror table = prefix + source table
    # tombstones whose origin timestamp is older than this are purged
    tombstone_horizon: int = Field(7 * 86400, ge=0, alias="tombstoneHorizonSeconds")
    purge_every: int = Field(100, ge=1, alias="purgeEveryBatches")
    # the database of the source tables on the shards; default: the keyspace's name
    source_database: str | None = Field(None, alias="sourceDatabase")
    # "driver": the job's driver applies each batch; "executors": every Spark task of a batch
    # applies its own rows, in parallel (apply-if-newer makes their order irrelevant)
    write_from: Literal["driver", "executors"] = Field("driver", alias="writeFrom")


class CDCv2Sink(_Model):
    type: Literal["cdcv2"]
    path: str = Field(min_length=1)
    format: Literal["jsonl", "parquet"] = "jsonl"
    # how far a shard's timestamps may go back; times complete only this much below watermarks
    allowed_lateness: int = Field(1, ge=0, alias="allowedLatenessSeconds")
    # "driver": one writer, in the job's driver; "executors": the update statements written by
    # Spark's tasks in `writePartitions` parts of the data at the same time, the progress by
    # the driver (updatestream.cdcv2.parallel_writer). A path keeps the mode it was started with
    write_from: Literal["driver", "executors"] = Field("driver", alias="writeFrom")
    write_partitions: int = Field(4, ge=1, le=256, alias="writePartitions")


class ConsoleSink(_Model):
    type: Literal["console"]
    path: str | None = None  # JSON lines file; stdout when absent


SinkSpec = Annotated[
    MemcachedSink | VersionStreamSink | MirrorSink | CDCv2Sink | ConsoleSink,
    Field(discriminator="type"),
]


# Launchers that existed once: a manifest (or the operator's --launcher) naming one is refused
# with why it went and what to use instead, rather than with a bare list of supported values.
REMOVED_LAUNCHERS: Final = {
    "spark-operator": (
        "the spark-operator launcher was removed (it was never run against a spark-operator "
        "controller); use spark-submit, which runs the job with spark-submit in cluster mode, "
        "or leave it unset for the operator's default"
    ),
}


class SparkSpec(_Model):
    # how the operator runs the job; None: the operator's default (spark-submit in a cluster)
    launcher: Literal["spark-submit", "local"] | None = None
    image: str | None = None
    master: str | None = None
    service_account: str | None = Field(None, alias="serviceAccount")
    driver: dict[str, str] = Field(default_factory=dict)
    executor: dict[str, str] = Field(default_factory=dict)
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("launcher", mode="before")
    @classmethod
    def _not_removed(cls, value: Any) -> Any:
        if isinstance(value, str) and value in REMOVED_LAUNCHERS:
            raise ValueError(REMOVED_LAUNCHERS[value])
        return value


class SnapshotRequest(_Model):
    """A snapshot on demand: re-read `table` (default: every table of the stream) in `keyRange`
    (default: the stream's whole range) while the stream runs; `id` is taken once."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    table: str | None = Field(None, min_length=1)
    key_range: CanonicalKeyRange | None = Field(None, alias="keyRange")

    def line(self) -> str:
        """The request as one JSON line of a job's requests file."""
        return self.model_dump_json(by_alias=True, exclude_none=True)


class UpdateStreamSpec(_Model):
    keyspace: str
    key_ranges: list[CanonicalKeyRange] = Field(
        default_factory=lambda: [KeyRange()], alias="keyRanges", min_length=1
    )
    tables: list[str] = Field(default_factory=list)
    start: StartPosition = Field(default_factory=StartPosition)
    sinks: list[SinkSpec] = Field(min_length=1)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    suspend: bool = False
    # snapshots on demand, passed to the running jobs without relaunching them
    snapshot_requests: list[SnapshotRequest] = Field(
        default_factory=list, alias="snapshotRequests", max_length=64
    )

    def snapshot_requests_text(self) -> str:
        """The requests file a job polls (JSON lines; empty: none)."""
        return "".join(request.line() + "\n" for request in self.snapshot_requests)


class UpdateStream(_Model):
    api_version: Literal["updatestream.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["UpdateStream"] = "UpdateStream"
    metadata: ObjectMeta
    spec: UpdateStreamSpec
    status: dict[str, Any] | None = None


# -- loading ------------------------------------------------------------------------------------


def describe_validation_error(exc: ValidationError) -> str:
    """Each error of `exc` as `field.path: message`, joined with "; "."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def _parse(model: type[_M], data: Mapping[str, Any], source: str) -> _M:
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        detail = describe_validation_error(exc)
    except UpdateStreamError as exc:
        detail = str(exc)
    raise SpecError(f"invalid {model.__name__} in {source}: {detail}")


def parse_keyspace(data: Mapping[str, Any], *, source: str = "Keyspace") -> Keyspace:
    return _parse(Keyspace, data, source)


def parse_update_stream(data: Mapping[str, Any], *, source: str = "UpdateStream") -> UpdateStream:
    return _parse(UpdateStream, data, source)


def load_manifest(path: Path) -> dict[str, Any]:
    """Read one YAML or JSON object from `path`, with errors naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read manifest {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise SpecError(f"manifest {path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"manifest {path} must hold one object, found {type(data).__name__}")
    return data


def load_keyspace(path: Path) -> Keyspace:
    return parse_keyspace(load_manifest(path), source=str(path))


def dump_keyspace(keyspace: Keyspace) -> str:
    return yaml.safe_dump(
        keyspace.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False
    )


class Credentials(_Model):
    username: str
    password: str = Field(repr=False)

    def __str__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***)"


def read_credentials(secrets_dir: Path, secret: SecretRef) -> Credentials:
    """Read a Secret mounted as files (`<secrets_dir>/<name>/username` and `password`)."""
    folder = secrets_dir / secret.name
    values: dict[str, str] = {}
    for key in ("username", "password"):
        try:
            values[key] = (folder / key).read_text(encoding="utf-8").rstrip("\n")
        except OSError:
            raise SpecError(
                f"Secret {secret.name!r} has no readable key {key!r} under {folder}; "
                "mount the Secret there or point --secrets-dir at its parent"
            ) from None
    return Credentials(**values)
