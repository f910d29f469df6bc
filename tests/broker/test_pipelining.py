"""Pipelined requests: every answer, in order, and none held back behind a long poll."""

from __future__ import annotations

import struct

from pulllog.log import build_batch
from pulllog.net.build import build, request_class, response_class
from pulllog.net.protocol import decode_response, encode_request
from pulllog.testing import BrokerThread

from kafka_wire import WireClient


def _produce_frame(correlation_id: int, topic: str, value: bytes) -> bytes:
    batch = build_batch([(None, value, 1_700_000_000_000)], timestamp=1_700_000_000_000)
    body = build(request_class("produce", 9), {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="pipeline-test")


def _long_poll_frame(correlation_id: int, topic: str, offset: int, wait_ms: int) -> bytes:
    body = build(request_class("fetch", 12), {
        "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                    "partition_max_bytes": 1 << 20}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="pipeline-test")


def test_fifty_pipelined_produces_are_all_answered_in_order(pulllog_broker: BrokerThread) -> None:
    frames = b"".join(_produce_frame(i, "piped", b"record %d" % i) for i in range(50))
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(frames)  # one write: the broker reads many requests at once

        answers = [decode_response(c.read_frame(), response_class("produce", 9)) for _ in range(50)]

    assert [cid for cid, _ in answers] == list(range(50))
    assert [int(body.responses[0].partition_responses[0].base_offset) for _, body in answers] == list(range(50))


def test_produce_answers_do_not_wait_behind_a_long_poll_that_follows_them(pulllog_broker: BrokerThread) -> None:
    frames = b"".join(_produce_frame(i, "piped-then-poll", b"x") for i in range(10))
    with WireClient(pulllog_broker.port, timeout=20.0) as c:
        c.send_raw(frames + _long_poll_frame(10, "piped-then-poll", offset=10, wait_ms=60_000))
        c.sock.settimeout(10.0)  # far below the long poll's 60 s: a held answer would time out here

        ids = [struct.unpack_from(">i", c.read_frame())[0] for _ in range(10)]

    assert ids == list(range(10))
