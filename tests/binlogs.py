"""Reading a development cluster's binlogs with the binlog library (no Spark), for tests: the
source configuration of a cluster, the shards' current positions, the change events between
two positions."""

from __future__ import annotations

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_jobs.source.options import SourceConfig, parse_options

from updatestream.binlog.events import ChangeEvent
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import RowConverter
from updatestream.binlog.session import ShardSession, flavor_of
from updatestream.core.gtid import GTIDPosition


def config_for(cluster: DevCluster, key_range: str = "-", **options: str) -> SourceConfig:
    """The binlog source's configuration for the cluster's manifest and Secrets."""
    return parse_options(
        {
            "keyspace": str(cluster.manifest_path),
            "secretsDir": str(cluster.secrets_dir),
            "keyRange": key_range,
            **options,
        }
    )


def positions(config: SourceConfig) -> dict[str, GTIDPosition]:
    """Each shard's current GTID position."""
    found = {}
    for endpoint in config.shards:
        with ShardSession(endpoint, config.reader) as session:
            found[endpoint.shard] = session.current_position()[0]
    return found


def read(
    config: SourceConfig, shard: str, start: GTIDPosition, end: GTIDPosition
) -> list[ChangeEvent]:
    """The change events of one shard after `start` up to and including `end`."""
    endpoint = config.endpoint(shard)
    converter = RowConverter(config.reader, shard, flavor_of(endpoint))
    return list(BinlogRangeReader(endpoint, config.reader, start, end, converter))
