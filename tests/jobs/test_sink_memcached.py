"""The memcached invalidation sink against a real memcached: seed 000's rules, with CAS."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pymemcache.client.base import Client
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext, SinkError

from harness.sink_events import ShardLog, two_shard_workload
from tests.concurrency import run_at_once
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cache.entry import decode, encode
from updatestream.cache.invalidator import Invalidator
from updatestream.cache.key_templates import KeyTemplateError, KeyTemplates
from updatestream.cache.transport import StoreOp
from updatestream.core.gtid import MariaDBPosition
from updatestream.core.token import EventToken
from updatestream.local_ports import free_port


def make_sink(
    servers: Sequence[str],
    keyspace: str,
    templates: dict[str, str] | None = None,
    extra: dict[str, list[str]] | None = None,
) -> MemcachedSink:
    config = spec.MemcachedSink.model_validate(
        {
            "type": "memcached",
            "servers": list(servers),
            "keyTemplate": templates or {},
            "extraKeys": extra or {},
        }
    )
    return MemcachedSink(config, keyspace=keyspace)


@pytest.fixture
def keyspace() -> str:
    return f"ks{uuid.uuid4().hex[:8]}"


@pytest.fixture
def raw(memcached: MemcachedServer) -> Iterator[Client]:
    client = Client(("127.0.0.1", memcached.port), default_noreply=False)
    yield client
    client.close()


def ctx(batch_id: int = 0) -> BatchContext:
    return BatchContext("s", "-", batch_id)


def token(ts: int, shard: str = "-80", pos: str = "1-1-5") -> str:
    return EventToken(ts, shard, MariaDBPosition.parse(pos)).dumps()


def change(tok: str, uid: int = 1, name: str = "a") -> ChangeEvent:
    parsed = EventToken.loads(tok)
    log = ShardLog(parsed.shard, 1)
    row = {"id": uid, "name": name, "visits": 0}
    event = log.transaction(parsed.timestamp, [("update", "users", row, row)])[0]
    return ChangeEvent.from_row({**_fields(event), "token": tok, "gtid": str(parsed.position)})


def _fields(event: ChangeEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in ChangeEvent.__dataclass_fields__}


def entry(raw: Client, key: str) -> tuple[str, bytes | None]:
    value = raw.get(key)
    assert value is not None, f"no entry for {key}"
    decoded = decode(value, key)
    return decoded.token_text, decoded.value


def test_the_four_rules(memcached: MemcachedServer, raw: Client, keyspace: str) -> None:
    sink = make_sink([memcached.address], keyspace, {"users": keyspace + "-u:{id}"})
    sink.open()
    key = f"{keyspace}-u:1"
    # no entry: the token is stored without a value
    sink.write_batch([change(token(100))], ctx())
    assert entry(raw, key) == (token(100), None)
    # an application populated it at a later position; an older change is dropped
    raw.set(key, encode(token(105, pos="1-1-9"), b'"fresh"'))
    result = sink.write_batch([change(token(104, pos="1-1-8"))], ctx(1))
    assert (result.written, result.skipped) == (0, 1)
    assert entry(raw, key) == (token(105, pos="1-1-9"), b'"fresh"')
    # same second, same shard: GTID positions decide; an older one is dropped
    sink.write_batch([change(token(105, pos="1-1-7"))], ctx(2))
    assert entry(raw, key)[1] == b'"fresh"'
    # strictly newer change: token replaced, value cleared
    sink.write_batch([change(token(105, pos="1-1-10"))], ctx(3))
    assert entry(raw, key) == (token(105, pos="1-1-10"), None)
    # same second from another shard: unknown order, invalidated with the current token
    raw.set(key, encode(token(106, pos="1-1-11"), b'"v"'))
    sink.write_batch([change(token(106, shard="80-", pos="2-2-3"))], ctx(4))
    assert entry(raw, key) == (token(106, shard="80-", pos="2-2-3"), None)
    sink.close()


def test_workload_leaves_each_key_at_its_last_change_and_replays_change_nothing(
    memcached: MemcachedServer, raw: Client, keyspace: str
) -> None:
    work = two_shard_workload()
    sink = make_sink([memcached.address], keyspace)
    sink.open()
    for i, batch in enumerate(work.batches):
        first = sink.write_batch(batch, ctx(i))
        keys = list(sink.changes(batch))
        before = raw.gets_many(keys)
        again = sink.write_batch(batch, ctx(i))
        assert raw.gets_many(keys) == before  # same bytes and CAS uniques: nothing written
        assert (again.written, again.skipped) == (0, len(keys))
        assert first.written + first.skipped == len(keys)
    assert first.written == 1  # last batch: the hop copy changed nothing, the new change did
    last: dict[str, str] = {}
    for event in work.unique:
        pk = json.loads(event.pk or "{}")
        last[f"{keyspace}:users:{pk['id']}"] = event.token
    for key, tok in last.items():
        assert entry(raw, key) == (tok, None)
    sink.close()


def test_composite_keys_invalidate_old_and_new_objects(
    memcached: MemcachedServer, raw: Client, keyspace: str
) -> None:
    sink = make_sink(
        [memcached.address],
        keyspace,
        {"users": keyspace + "-user:{id}"},
        {"users": [keyspace + "-byname:{name}", keyspace + "-all"]},
    )
    log = ShardLog("-80", 1)
    before = {"id": 7, "name": "old name", "visits": 0}
    after = {**before, "name": "new name"}
    events = log.transaction(300, [("update", "users", before, after)])
    keys = list(sink.changes(events))
    assert sorted(keys) == sorted(
        f"{keyspace}-{suffix}"
        for suffix in ("user:7", "byname:old%20name", "byname:new%20name", "all")
    )
    sink.write_batch(events, ctx())
    assert {k: entry(raw, k) for k in keys} == {k: (events[0].token, None) for k in keys}


class InterferingInvalidator(Invalidator):
    """Before its store, an application writes the entry `times` times (a real CAS race)."""

    def __init__(self, servers: Sequence[str], other: Client, times: int) -> None:
        super().__init__(servers, max_attempts=3)
        self.other = other
        self.times = times

    def _decide(
        self, key: str, found: tuple[bytes, bytes] | None, texts: Sequence[str]
    ) -> StoreOp | None:
        op = super()._decide(key, found, texts)
        if self.times > 0:
            self.times -= 1
            self.other.set(key, encode(token(50, pos="1-1-1"), b'"app"'), noreply=False)
        return op


def test_cas_conflict_is_read_again_and_decided_again(
    memcached: MemcachedServer, raw: Client, keyspace: str
) -> None:
    key = f"{keyspace}:users:1"
    raw.set(key, encode(token(40, pos="1-1-1"), b'"old"'))
    sink = make_sink([memcached.address], keyspace)
    sink.invalidator = InterferingInvalidator([memcached.address], raw, times=1)
    result = sink.write_batch([change(token(60))], ctx())
    assert result.written == 1
    assert entry(raw, key) == (token(60), None)  # decided again against the app's write
    sink.invalidator = InterferingInvalidator([memcached.address], raw, times=10)
    with pytest.raises(SinkError, match=r"memcached\(.*\): batch 5: 1 keys changed under"):
        sink.write_batch([change(token(70))], ctx(5))


def test_concurrent_invalidators_converge_on_the_newest_token(
    memcached: MemcachedServer, raw: Client, keyspace: str
) -> None:
    keys = 50
    tokens = [token(1000 + n, pos=f"1-1-{n + 1}") for n in range(40)]

    def run(worker: int) -> None:
        sink = make_sink([memcached.address], keyspace)
        try:
            for n in range(worker, len(tokens), 4):  # interleaved shares of the history
                events = [change(tokens[n], uid) for uid in range(keys)]
                sink.write_batch(events, ctx(n))
        finally:
            sink.close()

    run_at_once(run, 4)
    for uid in range(keys):
        assert entry(raw, f"{keyspace}:users:{uid}") == (tokens[-1], None)


def test_server_down_raises_sink_error_naming_sink_and_address(keyspace: str) -> None:
    address = f"127.0.0.1:{free_port()}"
    sink = make_sink([address], keyspace)
    with pytest.raises(SinkError, match=rf"memcached\({address}\): memcached {address} does not"):
        sink.open()
    with pytest.raises(SinkError) as err:
        sink.write_batch([change(token(1))], ctx(9))
    assert f"memcached({address})" in str(err.value)
    assert "batch 9" in str(err.value)
    assert f"memcached {address}:" in str(err.value)


def test_bad_templates_are_refused(keyspace: str) -> None:
    with pytest.raises(SinkError, match="must be a plain column name"):
        make_sink(["127.0.0.1:1"], keyspace, {"users": "u:{id.__class__}"})
    with pytest.raises(SinkError, match="whitespace"):
        make_sink(["127.0.0.1:1"], keyspace, {"users": "u {id}"})


def test_keys_are_memcached_safe() -> None:
    templates = KeyTemplates("commerce", {"events": "ev:{event_key}"}, {"orders": ["o:{a}:{b}"]})
    assert templates.key("events", {"event_key": "a b%c\n"}) == "ev:a%20b%25c%0A"
    assert templates.key("users", {"id": 5}) == "commerce:users:5"
    assert templates.key("pairs", {"a": "x", "b": None}) == "commerce:pairs:x:null"
    assert templates.extra_keys("orders", {"a": 1.5, "b": True}) == ["o:1.5:true"]
    long = templates.key("events", {"event_key": "é" * 300})
    assert len(long.encode()) <= 250 and "#" in long
    assert long == templates.key("events", {"event_key": "é" * 300})  # stable
    assert long != templates.key("events", {"event_key": "é" * 299 + "e"})
    with pytest.raises(KeyTemplateError, match="names column 'event_key'"):
        templates.key("events", {"id": 1})


def test_replay_of_unordered_tokens_writes_nothing(
    memcached: MemcachedServer, raw: Client, keyspace: str
) -> None:
    sink = make_sink([memcached.address], keyspace)
    key = f"{keyspace}:users:1"
    # two shards, one second: each change invalidates over the other (UNKNOWN order)
    events = [change(token(100, shard="80-", pos="2-2-3")), change(token(100))]
    assert sink.write_batch(events, ctx()).written == 1
    assert entry(raw, key) == (token(100), None)
    before = raw.gets(key)
    assert sink.write_batch(events, ctx()).written == 0
    assert raw.gets(key) == before  # same bytes, same CAS unique: not even rewritten
    sink.close()
