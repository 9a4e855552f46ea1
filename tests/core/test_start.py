"""The start interpreter the operator and the job share: every form, its text, its errors."""

from __future__ import annotations

import json

import pytest

from updatestream.core.gtid import Flavor, parse_position
from updatestream.core.start import Start, StartError
from updatestream.core.token import EventToken

TOKEN = EventToken(1700000000, "-80", parse_position("1-1-42"))


@pytest.mark.parametrize(
    ("text", "mode", "timestamp"),
    [
        ("now", "now", None),
        (None, "now", None),
        ("  earliest ", "earliest", None),
        ("snapshot", "snapshot", None),
        ("1700000000", "timestamp", 1700000000),
    ],
)
def test_bare_forms(text: str | None, mode: str, timestamp: int | None) -> None:
    start = Start.parse(text)
    assert (start.mode, start.timestamp, start.shards) == (mode, timestamp, ())
    assert Start.parse(start.to_text()) == start


def test_per_shard_forms_round_trip_and_normalise_shard_names() -> None:
    gtid = Start.parse('{"80-": "2-2-7", "00-80": "1-1-42"}')
    assert gtid.mode == "gtid" and gtid.shards_named() == ["-80", "80-"]
    assert gtid.given_token("-80") == EventToken(0, "-80", parse_position("1-1-42"))
    assert Start.parse(gtid.to_text()) == gtid
    tokens = Start.parse(json.dumps({"-80": TOKEN.to_json()}))
    assert tokens.mode == "tokens" and tokens.given_token("-80") == TOKEN
    assert tokens.given_token("80-") is None
    assert Start.parse(tokens.to_text()) == tokens


def test_resume_takes_the_strongest_form_per_shard() -> None:
    start = Start.from_fields(
        "resume",
        tokens={"-80": TOKEN.to_json()},
        gtid={"-80": "1-1-1", "80-": "2-2-9"},
        timestamps={"-80": 5, "80-": 6, "c0-": 7},
    )
    kinds = {s.shard: s.kind for s in start.shards}
    assert kinds == {"-80": "token", "80-": "gtid", "c0-": "timestamp"}
    assert start.given_token("-80") == TOKEN
    assert start.given_token("80-", Flavor.MARIADB) == EventToken(0, "80-", parse_position("2-2-9"))
    assert start.given_token("c0-") is None
    assert start.first_timestamp("c0-", now=99) == 7
    assert start.first_timestamp("-80", now=99) is None
    assert Start.parse(start.to_text()) == start


def test_first_timestamp_of_the_bare_modes() -> None:
    assert Start.parse("now").first_timestamp("-80", now=99) == 99
    assert Start.parse("123").first_timestamp("-80", now=99) == 123
    assert Start.parse("earliest").first_timestamp("-80", now=99) == 0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("yesterday", "option 'start' is 'yesterday'; use now, snapshot, earliest"),
        ("{not json", "option 'start' is not valid JSON"),
        ("{}", "empty JSON object; name the shards"),
        ('{"-80": "1-1-1", "80-": {"ts": 1}}', "mixes value kinds"),
        ('{"resume": {"timestamps": {"-80": "soon"}}}', "resume.timestamps[-80] must be seconds"),
        ('{"resume": {"gtid": {"-80": 5}}}', "resume.gtid[-80] must be GTID position text"),
        ('{"resume": {"tokens": {"-80": "x"}}}', "must be an Event Token object"),
        ('{"resume": {"when": {}}}', "'resume' must be an object with tokens, gtid"),
        ('{"resume": {}}', "'resume' names no shard"),
        ('{"zz": "1-1-1"}', "'zz' is not a shard name"),
    ],
)
def test_malformed_starts_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(StartError) as raised:
        Start.parse(text)
    assert says in str(raised.value)


@pytest.mark.parametrize("mode", ["timestamp", "gtid", "tokens", "resume"])
def test_a_spec_mode_without_its_value_is_refused(mode: str) -> None:
    with pytest.raises(StartError, match=f"start mode '{mode}' needs its value"):
        Start.from_fields(mode)
