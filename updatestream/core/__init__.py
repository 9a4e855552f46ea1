"""The pure core: key ranges, shard maps, vindexes, VSchema, GTID positions, event tokens, hops.

Nothing here imports kopf, pyspark, pymysql or kubernetes (an import-linter contract checks it).
"""
