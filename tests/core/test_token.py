"""Event Token comparison (seed 000 plus source provenance) and the JSON form."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.core.builders import refusal, tok
from updatestream.core.gtid import Flavor, PositionError, parse_position
from updatestream.core.token import Comparison, EventToken, SourceProvenance, TokenError, compare

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

B, A, E, X = Comparison.BEFORE, Comparison.AFTER, Comparison.EQUAL, Comparison.UNKNOWN


# a transaction on -80, and its copy on -40 that filtered replication made in a split
SOURCE = tok(100, "-80", "0-1-5")
COPY = tok(100, "-40", "2-3-70", ("-80", "0-1-5", 100))

CASES = [
    # seed 000: timestamps first
    ("ts differs, same shard", tok(100, "-80", "0-1-9"), tok(101, "-80", "0-1-5"), B),
    ("ts differs, other shard", tok(101, "-80", "0-1-5"), tok(100, "80-", "1-2-50"), A),
    # seed 000: same timestamp, same shard -> GTIDs
    ("same ts+shard, earlier gtid", SOURCE, tok(100, "-80", "0-1-6"), B),
    ("same ts+shard, later gtid", tok(100, "-80", "0-1-7"), tok(100, "-80", "0-1-6"), A),
    ("same ts+shard, same gtid", tok(100, "-80", "0-1-7"), tok(100, "-80", "0-1-7"), E),
    (
        "same ts+shard, mysql",
        tok(100, "-80", f"{U1}:1-5"),
        tok(100, "-80", f"{U1}:1-6"),
        B,
    ),
    # seed 000: same timestamp, different shards -> unknown
    ("same ts, other shard", SOURCE, tok(100, "80-", "1-2-5"), X),
    ("hop duplicate without provenance is unknown", SOURCE, tok(100, "-40", "2-3-70"), X),
    # provenance: source token vs its copy on a destination
    ("source vs its copy", SOURCE, COPY, E),
    ("source before a later copy", SOURCE, tok(100, "40-80", "3-4-12", ("-80", "0-1-6", 100)), B),
    ("source after an earlier copy", tok(100, "-80", "0-1-6"), COPY, A),
    (
        "provenance beats a skewed timestamp",
        tok(101, "-80", "0-1-10"),
        tok(100, "-40", "2-3-70", ("-80", "0-1-11", 100)),
        B,
    ),
    # provenance: two copies of one source transaction on both halves of a split
    ("two copies of one source trx", COPY, tok(100, "40-80", "3-4-9", ("-80", "0-1-5", 100)), E),
    ("copies of successive source trx", COPY, tok(100, "40-80", "3-4-9", ("-80", "0-1-6", 100)), B),
    (
        "copies from different sources, same ts",
        tok(100, "-80", "2-3-70", ("-40", "0-1-5", 100)),
        tok(100, "-80", "2-3-71", ("40-80", "1-1-5", 100)),
        B,  # falls to rule 3: same shard, same ts -> own GTIDs
    ),
    (
        "copies from different sources, different shards",
        COPY,
        tok(100, "80-", "5-5-1", ("80-", "9-1-1", 100)),
        X,
    ),
    # the stream already on a former destination: a token with provenance read from S and a
    # token whose provenance is S (split -80 -> -40, then merge -40,40-80 -> new -80)
    ("split then merge back", COPY, tok(100, "-80", "7-7-3", ("-40", "2-3-70", 100)), E),
    (
        "split then merge back, later copy",
        COPY,
        tok(100, "-80", "7-7-3", ("-40", "2-3-71", 100)),
        B,
    ),
    # provenance that cannot be related falls through to the timestamp rules
    ("unrelated provenance, ts decides", COPY, tok(101, "-40", "2-3-60", ("-80", "1-1-5", 101)), B),
]


@pytest.mark.parametrize(("a", "b", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compare(a: EventToken, b: EventToken, expected: Comparison) -> None:
    assert compare(a, b) is expected
    assert compare(b, a) is expected.mirror()  # antisymmetric


def test_compare_mixed_flavours_raises() -> None:
    with pytest.raises(PositionError):
        compare(tok(100, "-80", "0-1-5"), tok(100, "-80", f"{U1}:1"))


def test_no_ordering_operators() -> None:
    with pytest.raises(TypeError):
        _ = tok(1, "-80", "0-1-1") < tok(2, "-80", "0-1-2")  # type: ignore[operator]


ROUND_TRIPS = [
    tok(1700000000, "-80", "0-1-5"),
    tok(0, "-", "0-1-5,1-2-9"),
    tok(5, "80-", f"{U1}:1-5:7"),
    EventToken(7, "40-80", parse_position("", Flavor.MARIADB)),
    EventToken(7, "0", parse_position("", Flavor.MYSQL)),
    tok(1700000001, "-40", "2-3-70", ("-80", "0-1-5", 1700000001)),
]


@pytest.mark.parametrize("token", ROUND_TRIPS, ids=str)
def test_json_round_trip(token: EventToken) -> None:
    data = token.to_json()
    assert json.loads(json.dumps(data)) == data  # JSON-safe
    assert EventToken.from_json(data) == token
    assert EventToken.loads(token.dumps()) == token
    assert pickle.loads(pickle.dumps(token)) == token
    assert token.dumps() == EventToken.loads(token.dumps()).dumps()  # deterministic text


def test_json_shape() -> None:
    token = tok(1700000000, "-40", "0-1-5", ("-80", "0-2-9", 1699999999))
    assert token.to_json() == {
        "ts": 1700000000,
        "shard": "-40",
        "pos": "0-1-5",
        "flavor": "mariadb",
        "source": {"shard": "-80", "pos": "0-2-9", "ts": 1699999999, "flavor": "mariadb"},
    }
    assert "source" not in tok(1, "-80", "0-1-5").to_json()


def test_from_json_lenient_parts() -> None:
    # flavor may be left out when pos is not empty; source may be null; unknown keys ignored
    token = EventToken.from_json({"ts": 3, "shard": "-80", "pos": "0-1-5", "x": 1, "source": None})
    assert token == tok(3, "-80", "0-1-5")
    nested = EventToken.from_json(
        {
            "ts": 3,
            "shard": "-40",
            "pos": "",
            "flavor": "mariadb",
            "source": {"shard": "-80", "pos": "", "ts": 3},
        }
    )
    assert nested.source is not None
    assert nested.source.position.flavor is Flavor.MARIADB


GOOD = {"ts": 1, "shard": "-80", "pos": "0-1-5", "flavor": "mariadb"}

MALFORMED = [
    ({**GOOD, "ts": "1"}, "'ts'"),
    ({**GOOD, "ts": -1}, "'ts'"),
    ({**GOOD, "ts": True}, "'ts'"),
    ({k: v for k, v in GOOD.items() if k != "ts"}, "'ts'"),
    ({**GOOD, "shard": ""}, "'shard'"),
    ({**GOOD, "shard": 80}, "'shard'"),
    ({**GOOD, "pos": 5}, "'pos'"),
    ({**GOOD, "pos": "0-1"}, "'pos'"),
    ({**GOOD, "pos": f"{U1}:1"}, "'pos'"),  # does not match the declared flavour
    ({**GOOD, "pos": "", "flavor": None}, "'pos'"),
    ({**GOOD, "flavor": "postgres"}, "'flavor'"),
    ({**GOOD, "source": "-80"}, "'source'"),
    ({**GOOD, "source": {"shard": "-80", "pos": "0-1-5"}}, "'source.ts'"),
    ({**GOOD, "source": {"shard": "", "pos": "0-1-5", "ts": 1}}, "'source.shard'"),
    ({**GOOD, "source": {"shard": "-80", "pos": "x", "ts": 1}}, "'source.pos'"),
    ({**GOOD, "source": {"shard": "-80", "pos": "0-1-5", "ts": 1, "flavor": 3}}, "'source.flavor'"),
]


@pytest.mark.parametrize(("data", "field"), MALFORMED)
def test_from_json_malformed_names_the_field(data: dict[str, object], field: str) -> None:
    assert field in refusal(TokenError, lambda: EventToken.from_json(data))


@pytest.mark.parametrize("text", ["", "{", "[1]", "null", '"x"'])
def test_loads_malformed(text: str) -> None:
    with pytest.raises(TokenError, match="Event Token text"):
        EventToken.loads(text)


def test_constructor_validates() -> None:
    position = parse_position("0-1-5")
    with pytest.raises(TokenError, match="timestamp"):
        EventToken(-1, "-80", position)
    with pytest.raises(TokenError, match="shard"):
        EventToken(1, "", position)
    with pytest.raises(TokenError, match="position"):
        EventToken(1, "-80", "0-1-5")  # type: ignore[arg-type]
    with pytest.raises(TokenError, match="source provenance timestamp"):
        SourceProvenance("-80", position, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TokenError, match="source must be"):
        EventToken(1, "-80", position, source="-80")  # type: ignore[arg-type]
    assert EventToken(1, "-80", position).flavor is Flavor.MARIADB
