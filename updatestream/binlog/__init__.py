"""The binlog reader: MariaDB/MySQL binlogs read into change events, with no Spark in sight.

One shard's binlog is read through a `ShardSession` (`session`) between two GTID positions
(`positions`, `reader`); its rows become `ChangeEvent`s (`events`) stamped with Event Tokens and
source provenance (`rows`). `options` holds the typed settings of a read and `offsets` the
stream's per-shard progress. Errors a user can act on are typed (`errors`).

The Spark job's data source, the development cluster, the benchmarks and the snapshot all read
binlogs through this package.
"""
