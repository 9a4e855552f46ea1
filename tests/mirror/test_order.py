"""The mirror's pure parts: the order rule, GTID ordinals, values back to SQL, defaults."""

from __future__ import annotations

import base64
import re

from updatestream.core.gtid import ordinal
from updatestream.mirror.mirror_tables import comparable, default_literal, portable_collation
from updatestream.mirror.order import (
    Order,
    Verdict,
    classify,
    lineage,
    update_assignments,
)
from updatestream.mirror.values import to_sql


def test_the_order_rule() -> None:
    old = Order(100, "-80", 7, 0)
    # one shard: its binlog order decides, whatever the timestamps say (a transaction that
    # began earlier may commit a later change of the row)
    assert classify(Order(99, "-80", 8, 0), old) is Verdict.NEWER
    assert classify(Order(101, "-80", 6, 0), old) is Verdict.OLDER
    assert classify(Order(100, "-80", 7, 1), old) is Verdict.NEWER  # then the index in the tx
    assert classify(Order(100, "-80", 6, 5), old) is Verdict.OLDER
    assert classify(Order(100, "-80", 7, 0), old) is Verdict.EQUAL
    # different origin shards: timestamps decide
    assert classify(Order(101, "80-", 1, 0), old) is Verdict.NEWER
    assert classify(Order(99, "80-", 99, 0), old) is Verdict.OLDER
    unknown = classify(Order(100, "-40", 1, 0), old)  # same second, another shard
    assert unknown is Verdict.UNKNOWN and unknown.applies


def test_ordinals_grow_along_a_shards_positions() -> None:
    assert ordinal("0-1-5,1-2-7") == 12 < ordinal("0-1-5,1-2-8")
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert ordinal(f"{uuid}:1-42") == 42 < ordinal(f"{uuid}:1-43")
    assert ordinal(f"{uuid}:1-5:7-9") == 8
    assert ordinal("") == 0


def test_token_columns_are_assigned_last_in_the_safe_order() -> None:
    sql = update_assignments(["name", "_us_deleted"])
    assert re.findall(r"`(\w+)` = IF\(", sql) == [
        "name", "_us_deleted", "_us_ts", "_us_idx", "_us_seq", "_us_shard",
    ]  # fmt: skip
    assert sql.count("IF(") == 6


def test_values_back_to_sql() -> None:
    blob = {"$base64": base64.b64encode(b"\x00\x01").decode()}
    assert to_sql(blob, "blob") == b"\x00\x01"
    assert to_sql(["a", "c"], "set") == "a,c"
    assert to_sql("2024-01-02T03:04:05.000006", "datetime") == "2024-01-02 03:04:05.000006"
    # a JSON column arrives as the document's text on both flavors (MySQL's binary JSON is
    # written out as the server's text by the reader): passed as it is
    assert to_sql('{"k": 1}', "json") == '{"k": 1}' and to_sql('"x"', "json") == '"x"'
    assert to_sql({"k": 1}, "json") == '{"k": 1}'  # a decoded value, from an older reader
    assert to_sql('{"k": 1}', "longtext") == '{"k": 1}'  # MariaDB JSON arrives as its text
    assert to_sql("12.50", "decimal") == "12.50" and to_sql(None, "int") is None
    assert to_sql(True, "tinyint") == 1


def test_defaults_become_sql_literals() -> None:
    assert default_literal("'none'", "mariadb") == "'none'"
    assert default_literal("none", "mysql") == "'none'"
    assert default_literal("it's", "mysql") == "'it''s'"
    assert default_literal("0", "mysql") == "0"
    assert default_literal("CURRENT_TIMESTAMP", "mysql") == "CURRENT_TIMESTAMP"
    assert default_literal(None, "mysql") is None


def test_column_types_compare_as_both_products_mean_them() -> None:
    assert comparable("int(11)") == comparable("int") == "int"
    assert comparable("bigint(20) unsigned") == "bigint unsigned"
    assert comparable("json") == comparable("longtext")
    assert comparable("varchar(100)") != comparable("varchar(190)")
    assert comparable("decimal(14,2)") == "decimal(14,2)"


def test_a_shard_name_on_a_new_server_is_another_lineage() -> None:
    """A merge can bring back the name -80 on a new server whose sequence numbers start
    again: its changes are ordered against the old server's by time, not by sequence."""
    old_server, new_server = lineage("-80", "1-1-5000"), lineage("-80", "7-7-12")
    assert old_server == "-80/1-1" and new_server == "-80/7-7"
    stored = Order(100, old_server, 5000, 0)
    assert classify(Order(105, new_server, 12, 0), stored) is Verdict.NEWER
    assert classify(Order(105, old_server, 12, 0), stored) is Verdict.OLDER
    assert lineage("80-", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42").startswith("80-/3e11fa47")
    assert len(lineage("-80", ",".join(f"{d}-{d}-1" for d in range(40)))) <= 64


def test_collations_are_ones_the_mirror_server_has() -> None:
    """MySQL 8's default collation on a MariaDB mirror, and MariaDB's Unicode 14 ones on a
    MySQL mirror: the same accent and case rules under the name the server knows."""
    assert portable_collation("utf8mb4_0900_ai_ci", "mariadb") == "utf8mb4_uca1400_ai_ci"
    assert portable_collation("utf8mb4_0900_as_cs", "mariadb") == "utf8mb4_uca1400_as_cs"
    assert portable_collation("utf8mb4_0900_bin", "mariadb") == "utf8mb4_bin"
    assert portable_collation("utf8mb4_uca1400_ai_ci", "mysql") == "utf8mb4_0900_ai_ci"
    assert portable_collation("utf8mb4_general_ci", "mysql") == "utf8mb4_general_ci"
    assert portable_collation("utf8mb4_0900_ai_ci", "mysql") == "utf8mb4_0900_ai_ci"
