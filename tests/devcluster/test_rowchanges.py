"""The statements filtered replication applies to a destination keep the source's row order."""

from __future__ import annotations

from updatestream_cli.devcluster.rowchanges import RowChange, row_statements


def change(op: str, user_id: int) -> RowChange:
    values = {"id": user_id, "name": f"u{user_id}", "none_sources": {}}
    return RowChange("users", op, values if op == "write" else {"id": user_id}, b"\x10")


def test_deletes_are_one_statement_each_in_the_source_s_order() -> None:
    # a DELETE ... IN would log 5 before 9 whatever the order given: the source deleted 9 first
    statements = row_statements([change("delete", 9), change("delete", 5), change("write", 7)])
    assert [params for _, params in statements[:2]] == [[9], [5]]
    assert all(sql.startswith("DELETE FROM `commerce`.`users`") for sql, _ in statements[:2])


def test_consecutive_writes_to_one_table_are_one_upsert_in_the_order_given() -> None:
    statements = row_statements([change("write", 9), change("write", 5), change("delete", 1)])
    assert len(statements) == 2
    sql, params = statements[0]
    assert sql.startswith("INSERT INTO `commerce`.`users`") and params == [9, "u9", 5, "u5"]
