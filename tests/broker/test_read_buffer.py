"""The connection's reused read buffer (broker/server.py: a BufferedProtocol).

Frames are cut out of one buffer that every read refills: a frame split over reads at any
byte, a frame larger than the buffer, and a frame that waits for the connection's task while
later reads overwrite the buffer must all come out whole and unchanged.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from pulllog.broker.server import _FIRST_BUFFER, _READ_BUFFER, Connection
from pulllog.net.build import build, request_class, response_class
from pulllog.net.protocol import decode_response, encode_request
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

from kafka_wire import WireClient

_PRODUCE = response_class("produce", 9)


def _produce_frame(correlation_id: int, topic: str, value: bytes) -> bytes:
    batch = build_batch([(None, value, 1_700_000_000_000)], timestamp=1_700_000_000_000)
    body = build(request_class("produce", 9), {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="read-buffer-test")


def _long_poll_frame(correlation_id: int, topic: str) -> bytes:
    body = build(request_class("fetch", 12), {
        "max_wait": 60_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                    "partition_max_bytes": 1 << 20}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="read-buffer-test")


def _answer(client: WireClient) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce answer."""
    correlation_id, body = decode_response(client.read_frame(), _PRODUCE)
    partition = body.responses[0].partition_responses[0]
    return correlation_id, int(partition.error_code), int(partition.base_offset)


def _values(broker: BrokerThread, topic: str) -> list[bytes | None]:
    def read() -> list[bytes | None]:
        log = broker.broker.partition(topic, 0)  # type: ignore[union-attr]
        return [record.value for batch in log.read_batches(0, 64 << 20) for record in batch.records()]

    return broker.call(read)


def _connection(broker: BrokerThread) -> Connection:
    """The broker's one client connection (the test's)."""
    return _wait_for(broker, lambda: next(iter(broker.broker.connections)) if len(broker.broker.connections) == 1
                     else None)


def _wait_for(broker: BrokerThread, probe: Callable[[], Any]) -> Any:
    """Poll ``probe`` on the broker's loop until it returns something other than None/False."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        value = broker.call(probe)
        if value is not None and value is not False:
            return value
        time.sleep(0.001)
    raise AssertionError("the broker never reached the state waited for")


def test_frames_split_over_two_reads_at_every_byte_come_out_whole(pulllog_broker: BrokerThread) -> None:
    pulllog_broker.call(pulllog_broker.broker.topics.create, "split", 1)
    with WireClient(pulllog_broker.port) as c:
        connection = _connection(pulllog_broker)
        first = _produce_frame(1, "split", b"first value")
        second = _produce_frame(2, "split", b"second value")
        stream = first + second
        expected: list[bytes] = []
        offset = 0
        for cut in range(1, len(stream)):
            c.send_raw(stream[:cut])
            if cut >= len(first):  # the first frame is whole: answered from this read
                assert _answer(c) == (1, 0, offset)
            # the rest waits in the buffer, the start of the next frame
            _wait_for(pulllog_broker, lambda: connection.buffered == cut - (len(first) if cut >= len(first) else 0))
            c.send_raw(stream[cut:])
            if cut < len(first):
                assert _answer(c) == (1, 0, offset)
            assert _answer(c) == (2, 0, offset + 1)
            assert connection.buffered == 0
            expected += [b"first value", b"second value"]
            offset += 2
    assert _values(pulllog_broker, "split") == expected


@pytest.mark.parametrize("size", [10_000, _FIRST_BUFFER + 1, 150_000, _READ_BUFFER - 100, _READ_BUFFER + 1,
                                  3 * _READ_BUFFER, 9 << 20])
def test_frames_larger_than_a_read_and_than_the_read_buffer(tmp_path, size: int) -> None:
    """Large frames among small ones in one write: a frame that starts late in the buffer
    (moved to its front), one larger than the buffer (a larger buffer), and one over 8 MiB
    (the buffer goes back to its size after it)."""
    with BrokerThread(tmp_path / "data", properties={"message.max.bytes": str(16 << 20)}) as broker:
        broker.call(broker.broker.topics.create, "large", 1)
        large = bytes(range(256)) * (size // 256) + b"end"
        values = [b"before", large, b"after", b"before again", large, b"after again"]
        with WireClient(broker.port, timeout=30.0) as c:
            connection = _connection(broker)
            c.send_raw(b"".join(_produce_frame(i, "large", value) for i, value in enumerate(values)))
            assert [_answer(c) for _ in values] == [(i, 0, i) for i in range(len(values))]
            c.send_raw(_produce_frame(6, "large", b"last"))
            assert _answer(c) == (6, 0, 6)
            assert broker.call(lambda: len(connection._buf)) <= 8 << 20
        assert _values(broker, "large") == [*values, b"last"]


def test_a_frame_waiting_for_the_task_survives_the_reads_after_it(pulllog_broker: BrokerThread) -> None:
    """A Produce behind a long poll waits in the connection's queue while the next read
    refills the buffer it came in: it must have been copied out, not kept as a view."""
    for topic in ("polled", "queued"):
        pulllog_broker.call(pulllog_broker.broker.topics.create, topic, 1)
    with WireClient(pulllog_broker.port, timeout=20.0) as c, WireClient(pulllog_broker.port) as other:
        connections = pulllog_broker.broker.connections
        c.send_raw(_long_poll_frame(1, "polled") + _produce_frame(2, "queued", b"A" * 300))
        mine = _wait_for(pulllog_broker, lambda: next((conn for conn in connections if len(conn.frames) == 1), None))
        # the next read lands where the first one was (the buffer was empty after it), over
        # all of the queued frame's bytes
        c.send_raw(_produce_frame(3, "queued", b"B" * 500))
        _wait_for(pulllog_broker, lambda: len(mine.frames) == 2)
        assert other.call("produce", 9, {  # ends the long poll
            "transactional_id": None, "acks": 1, "timeout": 5000,
            "topic_data": [{"name": "polled", "partition_data": [
                {"index": 0, "records": build_batch([(None, b"wake")])}]}]}).responses[0] \
            .partition_responses[0].error_code == 0
        assert struct.unpack_from(">i", c.read_frame())[0] == 1  # the fetch's answer
        assert _answer(c) == (2, 0, 0)
        assert _answer(c) == (3, 0, 1)
    assert _values(pulllog_broker, "queued") == [b"A" * 300, b"B" * 500]


def test_many_frames_in_one_read_are_answered_in_order(pulllog_broker: BrokerThread) -> None:
    pulllog_broker.call(pulllog_broker.broker.topics.create, "many", 1)
    values = [b"value %d" % i * (i % 7 + 1) for i in range(200)]
    with WireClient(pulllog_broker.port) as c:
        connection = _connection(pulllog_broker)
        c.send_raw(_produce_frame(1000, "many", b"small"))
        assert _answer(c) == (1000, 0, 0)
        # a connection that sends small requests holds a small buffer (many are idle)
        assert pulllog_broker.call(lambda: len(connection._buf)) == _FIRST_BUFFER
        # 200 at once (~90 KB): the buffer grows while reads fill it
        c.send_raw(b"".join(_produce_frame(i, "many", value) for i, value in enumerate(values)))
        assert [_answer(c) for _ in values] == [(i, 0, i + 1) for i in range(len(values))]
    assert _values(pulllog_broker, "many") == [b"small", *values]
