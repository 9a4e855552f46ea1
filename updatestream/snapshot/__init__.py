"""The snapshot's reading side: table descriptions, key-ordered chunk bounds and chunk reads on
the shards (pymysql and the binlog reader; no Spark). Progress and planning rules are pure and
live in `updatestream.core.snapshot_plan`."""
