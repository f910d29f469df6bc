"""Pipelined requests: every answer, in order, and none held back behind a long poll.

Produce requests are answered inside ``buffer_updated`` while the connection's task is idle,
and by the task once any request needs it: these tests mix the two in one read.
"""

from __future__ import annotations

import struct

from pulllog.records import build_batch
from pulllog.net.build import build, request_class, response_class
from pulllog.net.protocol import decode_response, encode_request
from pulllog.testing import BrokerThread

from kafka_wire import WireClient


def _produce_frame(correlation_id: int, topic: str, value: bytes, acks: int = 1) -> bytes:
    batch = build_batch([(None, value, 1_700_000_000_000)], timestamp=1_700_000_000_000)
    body = build(request_class("produce", 9), {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="pipeline-test")


def _long_poll_frame(correlation_id: int, topic: str, offset: int, wait_ms: int) -> bytes:
    body = build(request_class("fetch", 12), {
        "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                    "partition_max_bytes": 1 << 20}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="pipeline-test")


def _create(broker: BrokerThread, topic: str) -> None:
    broker.call(broker.broker.topics.create, topic, 1)


def test_fifty_pipelined_produces_are_all_answered_in_order(pulllog_broker: BrokerThread) -> None:
    _create(pulllog_broker, "piped")
    frames = b"".join(_produce_frame(i, "piped", b"record %d" % i) for i in range(50))
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(frames)  # one write: the broker reads many requests at once

        answers = [decode_response(c.read_frame(), response_class("produce", 9)) for _ in range(50)]

    assert [cid for cid, _ in answers] == list(range(50))
    assert [int(body.responses[0].partition_responses[0].base_offset) for _, body in answers] == list(range(50))


def test_produce_answers_do_not_wait_behind_a_long_poll_that_follows_them(pulllog_broker: BrokerThread) -> None:
    _create(pulllog_broker, "piped-then-poll")
    frames = b"".join(_produce_frame(i, "piped-then-poll", b"x") for i in range(10))
    with WireClient(pulllog_broker.port, timeout=20.0) as c:
        c.send_raw(frames + _long_poll_frame(10, "piped-then-poll", offset=10, wait_ms=60_000))
        c.sock.settimeout(10.0)  # far below the long poll's 60 s: a held answer would time out here

        ids = [struct.unpack_from(">i", c.read_frame())[0] for _ in range(10)]

    assert ids == list(range(10))


def _metadata_frame(correlation_id: int) -> bytes:
    body = build(request_class("metadata", 12), {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return encode_request(body, correlation_id=correlation_id, client_id="pipeline-test")


def test_produces_around_other_requests_in_one_read_are_answered_in_order(pulllog_broker: BrokerThread) -> None:
    _create(pulllog_broker, "mixed")
    frames = [_produce_frame(i, "mixed", b"m%d" % i) for i in range(5)]
    frames += [_metadata_frame(5)]
    frames += [_produce_frame(i, "mixed", b"m%d" % i) for i in range(6, 9)]
    frames += [_metadata_frame(9), _produce_frame(10, "mixed", b"last")]
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(b"".join(frames))

        ids = [struct.unpack_from(">i", c.read_frame())[0] for _ in range(11)]
        # and one request at a time afterwards: the connection is idle again
        c.send_raw(_produce_frame(11, "mixed", b"alone"))
        cid, body = decode_response(c.read_frame(), response_class("produce", 9))

    assert ids == list(range(11))
    assert (cid, int(body.responses[0].partition_responses[0].base_offset)) == (11, 9)


def test_acks_0_produces_get_no_answer_and_the_next_request_does(pulllog_broker: BrokerThread) -> None:
    _create(pulllog_broker, "acks-zero")
    frames = [_produce_frame(i, "acks-zero", b"z", acks=0) for i in range(3)] + [_metadata_frame(3)]
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(b"".join(frames))
        assert struct.unpack_from(">i", c.read_frame())[0] == 3
        c.send_raw(_produce_frame(4, "acks-zero", b"acked"))
        cid, body = decode_response(c.read_frame(), response_class("produce", 9))

    assert (cid, int(body.responses[0].partition_responses[0].base_offset)) == (4, 3)


def test_a_produce_that_does_not_decode_closes_the_connection_after_the_answers_before_it(
    pulllog_broker: BrokerThread,
) -> None:
    good = [_produce_frame(i, "then-junk", b"g") for i in range(3)]
    junk = _produce_frame(3, "then-junk", b"j")
    junk = struct.pack(">i", len(junk) - 4 + 2) + junk[4:] + b"\x00\x00"  # trailing bytes: a bad body
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(b"".join(good) + junk + _produce_frame(4, "then-junk", b"never"))

        ids = [struct.unpack_from(">i", c.read_frame())[0] for _ in range(3)]
        assert c.is_closed_by_peer()

    assert ids == [0, 1, 2]
    assert pulllog_broker.broker is not None and pulllog_broker.broker.internal_errors == 0
