"""The binlog source: shard binlogs as change events.

`session`, `positions`, `binlog` and `rows` read MariaDB/MySQL binary logs without Spark;
`datasource` is the Spark Python Data Source (short name `updatestream`) built on them.
"""
