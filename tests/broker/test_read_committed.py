"""The partition side of transactions on the wire: Fetch and ListOffsets by isolation level,
the long poll at the last stable offset, DescribeProducers, and librdkafka's read_committed
consumer. Transactional batches and markers are written through the Log API, as the
transaction coordinator writes markers (no coordinator needed here)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka_wire import WireClient, produce
from txn_helpers import read_values
from waits import TIMEOUT_S, block_until, expired_fetches, parked_fetches

from pulllog.records import build_batch
from pulllog.records.batch import iter_batches

LONG_WAIT_MS = 120_000
# Markers carry the broker's clock: data stamped far from it would roll a segment (segment.ms).
T0 = int(time.time() * 1000)


class Partition:
    """Partition 0 of a topic on the broker, written as a producer and the coordinator would."""

    def __init__(self, broker: Any, topic: str) -> None:
        self.broker, self.topic = broker, topic
        with WireClient(broker.port) as c:
            produce(c, topic, 0, build_batch([(None, b"p0", T0)]))  # creates the topic: offset 0
        self.log = broker.call(lambda: broker.broker.topics.topics[topic].partitions[0].log)
        self.seqs: dict[int, int] = {}

    def txn(self, pid: int, *values: bytes, ts: int = T0) -> int:
        seq = self.seqs.get(pid, 0)
        self.seqs[pid] = seq + len(values)
        data = build_batch([(None, v, ts) for v in values], producer_id=pid, producer_epoch=0,
                           base_sequence=seq, transactional=True)
        return self._append(data)

    def plain(self, *values: bytes, ts: int = T0) -> int:
        return self._append(build_batch([(None, v, ts) for v in values]))

    def _append(self, data: bytes) -> int:
        info = self.broker.call(self.log.append, data)
        self.broker.call(self.broker.broker.on_append, self.topic, 0)
        return info.first_offset

    def marker(self, pid: int, commit: bool) -> int:
        offset = self.broker.call(self.log.write_txn_marker, pid, 0, commit, 0)
        self.broker.call(self.broker.broker.on_append, self.topic, 0)  # as broker/txn_markers.py does
        return offset


def fetch(c: WireClient, topic: str, offset: int, isolation: int, *, max_wait_ms: int = 0,
          max_bytes: int = 1 << 20) -> Any:
    resp = c.call("fetch", 12, {
        "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                     "partition_max_bytes": max_bytes}]}],
    })
    return resp.responses[0].partitions[0]


def offsets_in(part: Any) -> list[int]:
    return [h.base_offset for _pos, h in iter_batches(bytes(part.records or b""))]


def list_offset(c: WireClient, topic: str, timestamp: int, isolation: int) -> tuple[int, int]:
    r = c.call("list_offsets", 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
    p = r.topics[0].partitions[0]
    return p.offset, p.timestamp


# ---------------------------------------------------------------------------- Fetch


def test_read_committed_reads_up_to_the_lso_and_lists_aborted_transactions(pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc")
    t.txn(7, b"a1")  # 1
    t.txn(8, b"b1")  # 2
    t.marker(7, commit=False)  # 3
    t.plain(b"p4")  # 4
    with WireClient(pulllog_broker.port) as c:
        committed = fetch(c, "rc", 0, isolation=1)
        uncommitted = fetch(c, "rc", 0, isolation=0)
        t.marker(8, commit=True)  # 5
        after = fetch(c, "rc", 0, isolation=1)
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 2), "8's transaction is open at 2"
    assert offsets_in(committed) == [0, 1], "nothing at or past the LSO"
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(7, 1)]
    assert offsets_in(uncommitted) == [0, 1, 2, 3, 4] and uncommitted.aborted_transactions is None
    assert uncommitted.last_stable_offset == 2
    assert after.last_stable_offset == after.high_watermark == 6
    assert offsets_in(after) == [0, 1, 2, 3, 4, 5]
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(7, 1)]


def test_aborted_transactions_are_only_those_of_the_returned_range(pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc-range")
    t.txn(1, b"x")  # 1
    t.marker(1, commit=False)  # 2
    t.plain(b"p")  # 3
    with WireClient(pulllog_broker.port) as c:
        part = fetch(c, "rc-range", 3, isolation=1)
    assert offsets_in(part) == [3] and part.aborted_transactions == ()


def test_a_read_committed_long_poll_at_the_lso_wakes_on_the_marker_not_on_more_of_the_transaction(
        pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc-poll")
    t.txn(5, b"t1")  # 1
    result: dict[str, Any] = {}

    def poll() -> None:
        with WireClient(pulllog_broker.port, timeout=TIMEOUT_S) as c:
            result["part"] = fetch(c, "rc-poll", 1, isolation=1, max_wait_ms=LONG_WAIT_MS)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        block_until(lambda: parked_fetches(pulllog_broker, "rc-poll") == 1, "the fetch at the LSO is parked")
        t.txn(5, b"t2")  # 2: appended and announced, but still not committed
        assert parked_fetches(pulllog_broker, "rc-poll") == 1, "more of an open transaction wakes nobody"
        assert "part" not in result
        t.marker(5, commit=True)  # 3
        thread.join(TIMEOUT_S)
    finally:
        if thread.is_alive():
            t.plain(b"unblock")
            thread.join(TIMEOUT_S)
    part = result["part"]
    assert part.last_stable_offset == 4
    assert offsets_in(part) == [1, 2, 3]
    assert expired_fetches(pulllog_broker) == 0, "woken by the marker, not by its deadline"


# ---------------------------------------------------------------------------- ListOffsets


def test_list_offsets_latest_is_the_lso_for_read_committed(pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc-list")
    t.txn(3, b"open", ts=T0 + 1)  # 1
    t.plain(b"after", ts=T0 + 2)  # 2
    with WireClient(pulllog_broker.port) as c:
        assert list_offset(c, "rc-list", -1, isolation=0)[0] == 3
        assert list_offset(c, "rc-list", -1, isolation=1)[0] == 1
        # A record found by timestamp past the LSO is not readable yet: not found, as Kafka.
        assert list_offset(c, "rc-list", T0, isolation=1) == (0, T0)
        assert list_offset(c, "rc-list", T0 + 1, isolation=0) == (1, T0 + 1)
        assert list_offset(c, "rc-list", T0 + 1, isolation=1) == (-1, -1)
        assert list_offset(c, "rc-list", -3, isolation=0) == (2, T0 + 2)
        assert list_offset(c, "rc-list", -3, isolation=1) == (-1, -1)
        t.marker(3, commit=True)
        assert list_offset(c, "rc-list", -1, isolation=1)[0] == 4
        assert list_offset(c, "rc-list", T0 + 1, isolation=1) == (1, T0 + 1)


# ---------------------------------------------------------------------------- DescribeProducers


def test_describe_producers_shows_open_transactions_and_epochs(pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc-producers")
    t.txn(11, b"a", b"b")  # 1-2
    t.txn(12, b"c")  # 3
    t.marker(12, commit=True)  # 4
    with WireClient(pulllog_broker.port) as c:
        resp = c.call("describe_producers", 0, {"topics": [
            {"name": "rc-producers", "partition_indexes": [0]}, {"name": "no-such-topic", "partition_indexes": [0]}]})
    (part,), (missing,) = (t.partitions for t in resp.topics)
    assert part.error_code.value == 0
    states = {p.producer_id: p for p in part.active_producers}
    assert set(states) == {11, 12}
    assert (states[11].producer_epoch, states[11].last_sequence, states[11].current_txn_start_offset) == (0, 1, 1)
    assert states[11].last_timestamp == T0
    assert (states[12].coordinator_epoch, states[12].current_txn_start_offset) == (0, -1)
    assert missing.error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------------------- librdkafka


def test_librdkafka_read_committed_skips_aborted_data_and_markers(pulllog_broker: Any) -> None:
    t = Partition(pulllog_broker, "rc-rdkafka")  # p0
    t.txn(21, b"aborted-1")
    t.txn(22, b"committed-1")
    t.txn(21, b"aborted-2")
    t.marker(21, commit=False)
    t.plain(b"p1")
    t.txn(22, b"committed-2")
    t.marker(22, commit=True)
    t.txn(23, b"open")  # never ended: read_committed stops before it
    t.plain(b"p2")
    committed = [b"p0", b"committed-1", b"p1", b"committed-2"]
    bootstrap = pulllog_broker.bootstrap_servers
    # read to the end each may read: the LSO for read_committed, the high watermark otherwise
    assert read_values(bootstrap, "rc-rdkafka", expect=len(committed)) == committed
    everything = [b"p0", b"aborted-1", b"committed-1", b"aborted-2", b"p1", b"committed-2", b"open", b"p2"]
    assert read_values(bootstrap, "rc-rdkafka", isolation="read_uncommitted", expect=len(everything)) == everything
    t.marker(23, commit=False)
    t.plain(b"p3")
    assert read_values(bootstrap, "rc-rdkafka", expect=6) == committed + [b"p2", b"p3"]


async def test_aiokafka_read_committed_skips_aborted_data_and_markers(pulllog_broker: Any) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    t = Partition(pulllog_broker, "rc-aiokafka")  # p0
    t.txn(31, b"aborted")
    t.txn(32, b"committed")
    t.marker(31, commit=False)
    t.marker(32, commit=True)
    t.txn(33, b"open")
    t.plain(b"p1")
    consumer = AIOKafkaConsumer(bootstrap_servers=pulllog_broker.bootstrap_servers, enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    tp = AioTopicPartition("rc-aiokafka", 0)
    values: list[bytes] = []
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < 2 and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                values += [r.value for r in records]
        assert values == [b"p0", b"committed"]
        assert await consumer.end_offsets([tp]) == {tp: 5}, "the LSO: 33's transaction is open at 5"
    finally:
        await consumer.stop()
