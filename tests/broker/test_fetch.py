"""Fetch semantics real clients rely on: long polling, max bytes, partial batches, offsets."""

from __future__ import annotations

import threading

import pytest
from kafka_wire import WireClient, fetch, produce
from waits import TIMEOUT_S, block_until, expired_fetches, parked_fetches

from pulllog.records import build_batch
from pulllog.records.batch import iter_batches


# Longer than any test runs: only the data it waits for can answer the fetch.
LONG_WAIT_MS = 120_000


def records_bytes(part) -> bytes:
    return bytes(part.records or b"")


def test_long_poll_returns_as_soon_as_data_arrives(pulllog_broker) -> None:
    port = pulllog_broker.port
    with WireClient(port) as c:
        produce(c, "poll", 0, build_batch([(b"k", b"first")]))
    result: dict[str, int] = {}

    def poll() -> None:
        with WireClient(port, timeout=TIMEOUT_S) as c:
            resp = fetch(c, "poll", 0, 1, max_wait_ms=LONG_WAIT_MS)
            result["bytes"] = len(records_bytes(resp.responses[0].partitions[0]))

    t = threading.Thread(target=poll)
    t.start()
    block_until(lambda: parked_fetches(pulllog_broker, "poll") == 1, "the fetch at offset 1 is parked in the purgatory")
    assert "bytes" not in result  # no data, so no answer yet
    with WireClient(port) as c:
        produce(c, "poll", 0, build_batch([(b"k", b"second")]))
    t.join(TIMEOUT_S)
    assert result["bytes"] > 0
    assert expired_fetches(pulllog_broker) == 0  # woken by the append, not by its deadline


def test_long_poll_without_data_returns_empty_at_its_deadline(pulllog_broker) -> None:
    with WireClient(pulllog_broker.port) as c:
        produce(c, "idle", 0, build_batch([(b"k", b"v")]))
        resp = fetch(c, "idle", 0, 1, max_wait_ms=300)
    part = resp.responses[0].partitions[0]
    assert part.error_code.value == 0 and records_bytes(part) == b""
    # Answered by the purgatory's timer: the fetch was parked and its deadline completed it.
    assert expired_fetches(pulllog_broker) == 1
    assert parked_fetches(pulllog_broker, "idle") == 0


def test_min_bytes_waits_for_enough_data(pulllog_broker) -> None:
    port = pulllog_broker.port
    one = build_batch([(b"k", b"x" * 100)])
    with WireClient(port) as c:
        produce(c, "minbytes", 0, one)
    out = {}

    def poll() -> None:
        with WireClient(port, timeout=TIMEOUT_S) as c:
            out["resp"] = fetch(c, "minbytes", 0, 1, max_wait_ms=LONG_WAIT_MS, min_bytes=len(one) * 3)

    t = threading.Thread(target=poll)
    t.start()
    block_until(lambda: parked_fetches(pulllog_broker, "minbytes") == 1, "the fetch is parked in the purgatory")
    with WireClient(port) as c:
        for _ in range(2):
            produce(c, "minbytes", 0, one)
            # The append tried to complete the fetch (in the Produce handler): not enough bytes yet.
            assert parked_fetches(pulllog_broker, "minbytes") == 1
        produce(c, "minbytes", 0, one)
    t.join(TIMEOUT_S)
    data = records_bytes(out["resp"].responses[0].partitions[0])
    assert len(data) >= len(one) * 3
    assert expired_fetches(pulllog_broker) == 0  # completed by the third append, not its deadline


def test_partition_max_bytes_cuts_after_the_first_batch(pulllog_broker) -> None:
    batch = build_batch([(b"k", b"v" * 500)])
    with WireClient(pulllog_broker.port) as c:
        for _ in range(10):
            produce(c, "cut", 0, batch)
        part = fetch(c, "cut", 0, 0, partition_max_bytes=len(batch) * 2 + 100).responses[0].partitions[0]
        data = records_bytes(part)
        assert len(data) == len(batch) * 2 + 100  # two whole batches and a partial one
        assert len(list(iter_batches(data))) == 2
        small = fetch(c, "cut", 0, 0, partition_max_bytes=10).responses[0].partitions[0]
        assert len(records_bytes(small)) == len(batch)  # one whole batch even when larger


def test_fetch_max_bytes_spans_partitions(pulllog_broker) -> None:
    batch = build_batch([(b"k", b"v" * 500)])
    with WireClient(pulllog_broker.port) as c:
        c.call("create_topics", 7, {"topics": [{"name": "wide", "num_partitions": 3, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout": 5000,
                                    "validate_only": False})
        for p in range(3):
            for _ in range(5):
                produce(c, "wide", p, batch)
        resp = c.call("fetch", 12, {
            "max_wait": 0, "min_bytes": 1, "max_bytes": len(batch) * 6, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "wide", "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(3)]}],
        })
    sizes = [len(records_bytes(p)) for p in resp.responses[0].partitions]
    assert sum(sizes) == len(batch) * 6
    assert sizes[0] == len(batch) * 5 and sizes[2] == 0


@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_reports_watermarks(pulllog_broker, isolation: int) -> None:
    with WireClient(pulllog_broker.port) as c:
        produce(c, "marks", 0, build_batch([(b"k", b"v")] * 4))
        c.call("delete_records", 2, {"topics": [{"name": "marks", "partitions": [
            {"partition_index": 0, "offset": 1}]}], "timeout": 5000})
        resp = c.call("fetch", 12, {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "marks", "partitions": [{"partition": 0, "fetch_offset": 1,
                                                          "partition_max_bytes": 1 << 20}]}],
        })
    part = resp.responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (4, 4, 1)
    assert (part.aborted_transactions == ()) if isolation else (part.aborted_transactions is None)


def test_list_offsets_earliest_latest_and_by_timestamp(pulllog_broker) -> None:
    with WireClient(pulllog_broker.port) as c:
        for i in range(5):
            produce(c, "times", 0, build_batch([(b"k", b"v", 1000 + 100 * i)]))

        def lookup(ts: int):
            r = c.call("list_offsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "times", "partitions": [{"partition_index": 0, "timestamp": ts}]}]})
            p = r.topics[0].partitions[0]
            return p.offset, p.timestamp

        assert lookup(-2)[0] == 0
        assert lookup(-1)[0] == 5
        assert lookup(1150) == (2, 1200)
        assert lookup(1400) == (4, 1400)
        assert lookup(99999) == (-1, -1)
        assert lookup(-3) == (4, 1400)
