"""Bad input gets a Kafka error code or a closed connection; the broker keeps serving."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulllog.records import build_batch
from pulllog.testing import BrokerThread

from kafka_wire import WireClient, fetch, produce

ErrorCodes = {"none": 0, "offset_out_of_range": 1, "corrupt_message": 2, "unknown_topic_or_partition": 3,
              "message_too_large": 10, "invalid_topic_exception": 17, "invalid_required_acks": 21,
              "unsupported_for_message_format": 43, "invalid_record": 87}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    with BrokerThread(tmp_path_factory.mktemp("bad-input"), properties={"message.max.bytes": "100000",
                                                                         "socket.request.max.bytes": "1048576"}) as b:
        yield b


def still_serves(broker: BrokerThread) -> None:
    assert broker.broker.internal_errors == 0, "a handler failed on input it should have refused"
    with WireClient(broker.port) as c:
        resp = c.call("metadata", 12, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        assert resp.brokers[0].port == broker.port


def test_frame_with_a_huge_size_closes_the_connection(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
        assert c.is_closed_by_peer()
    still_serves(broker)


def test_frame_with_a_negative_size_closes_the_connection(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(struct.pack(">i", -5))
        assert c.is_closed_by_peer()
    still_serves(broker)


def test_http_request_closes_the_connection(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.is_closed_by_peer()
    still_serves(broker)


def test_truncated_frame_waits_and_a_disconnect_is_harmless(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")  # 8 of the 100 promised bytes
        assert not c.is_closed_by_peer(timeout=0.3)
    still_serves(broker)


def test_unknown_api_key_closes_the_connection(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(struct.pack(">ihhih", 10, 9999, 0, 7, -1))
        assert c.is_closed_by_peer()
    still_serves(broker)


def test_unsupported_api_versions_version_gets_unsupported_version(broker) -> None:
    with WireClient(broker.port) as c:
        c.send_raw(struct.pack(">ihhih", 10, 18, 99, 42, -1))
        frame = c.read_frame()
        correlation_id, error_code = struct.unpack_from(">ih", frame)
        assert (correlation_id, error_code) == (42, 35)  # UNSUPPORTED_VERSION, v0 body
        (count,) = struct.unpack_from(">i", frame, 6)
        assert count > 5  # the versions the client may use instead


def test_garbage_body_of_a_known_request_closes_the_connection(broker) -> None:
    with WireClient(broker.port) as c:
        body = struct.pack(">hhih", 0, 9, 5, -1) + b"\x00" + b"\xff" * 40
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.is_closed_by_peer()
    still_serves(broker)


@pytest.mark.parametrize("name", ["..", ".", "a" * 250, "bad/name", "sp ace", "ünï"])
def test_invalid_topic_names_are_refused(broker, name: str) -> None:
    with WireClient(broker.port) as c:
        resp = produce(c, name, 0, build_batch([(b"k", b"v")]))
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["invalid_topic_exception"]
        meta = c.call("metadata", 12, {"topics": [{"name": name, "topic_id": None}],
                                       "allow_auto_topic_creation": True,
                                       "include_topic_authorized_operations": False})
        assert meta.topics[0].error_code.value == ErrorCodes["invalid_topic_exception"]


def test_produce_to_a_missing_partition_is_unknown_topic_or_partition(broker) -> None:
    with WireClient(broker.port) as c:
        produce(c, "exists", 0, build_batch([(b"k", b"v")]))
        resp = produce(c, "exists", 7, build_batch([(b"k", b"v")]))
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["unknown_topic_or_partition"]


def test_corrupt_batch_is_refused_and_nothing_is_appended(broker) -> None:
    with WireClient(broker.port) as c:
        good = build_batch([(b"k", b"v" * 50)])
        bad = bytearray(build_batch([(b"k", b"w" * 50)]))
        bad[-2] ^= 0x40
        resp = produce(c, "corrupt", 0, good + bytes(bad))
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["corrupt_message"]
        resp = fetch(c, "corrupt", 0, 0)
        assert resp.responses[0].partitions[0].high_watermark == 0


def test_magic_1_message_set_is_refused(broker) -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1000, key=b"k", value=b"v")
    with WireClient(broker.port) as c:
        resp = produce(c, "legacy", 0, bytes(builder.build()))
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["unsupported_for_message_format"]


def test_batch_over_message_max_bytes_is_message_too_large(broker) -> None:
    with WireClient(broker.port) as c:
        resp = produce(c, "big", 0, build_batch([(None, os.urandom(150_000))]))
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["message_too_large"]


def test_invalid_acks_is_invalid_required_acks(broker) -> None:
    with WireClient(broker.port) as c:
        resp = produce(c, "acks", 0, build_batch([(b"k", b"v")]), acks=2)
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["invalid_required_acks"]


def test_negative_and_past_the_end_fetch_offsets_are_out_of_range(broker) -> None:
    with WireClient(broker.port) as c:
        produce(c, "range", 0, build_batch([(b"k", b"v")] * 3))
        for offset in (-1, 4, 2**62):
            part = fetch(c, "range", 0, offset).responses[0].partitions[0]
            assert part.error_code.value == ErrorCodes["offset_out_of_range"]
            assert part.high_watermark == 3
        assert fetch(c, "range", 0, 3).responses[0].partitions[0].error_code.value == 0


def test_a_partial_write_does_not_block_other_clients(broker) -> None:
    with WireClient(broker.port) as slow:
        slow.send_raw(struct.pack(">i", 1000) + b"\x00" * 10)
        still_serves(broker)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=300))
def test_random_bytes_never_take_the_broker_down(broker, junk: bytes) -> None:
    with WireClient(broker.port, timeout=5) as c:
        try:
            c.send_raw(junk)
        except OSError:
            pass
    still_serves(broker)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([0, 1, 2, 3, 18, 19, 20, 32, 37]), st.integers(0, 12), st.binary(max_size=200))
def test_random_request_bodies_never_take_the_broker_down(broker, api_key: int, version: int, body: bytes) -> None:
    frame = struct.pack(">hhih", api_key, version, 1, -1) + b"\x00" + body
    with WireClient(broker.port, timeout=5) as c:
        try:
            c.send_raw(struct.pack(">i", len(frame)) + frame)
            c.is_closed_by_peer(timeout=0.2)
        except OSError:
            pass
    still_serves(broker)


def test_control_batches_from_clients_are_refused(broker) -> None:
    from pulllog.records.control import build_control_batch

    with WireClient(broker.port) as c:
        marker = build_control_batch(1, 0, True, 0, 0)
        resp = produce(c, "markers", 0, marker)
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["invalid_record"]
        assert fetch(c, "markers", 0, 0).responses[0].partitions[0].high_watermark == 0


def test_produce_to_a_missing_topic_is_unknown_topic_or_partition_and_creates_nothing(broker) -> None:
    # As Kafka: only Metadata auto-creates a topic; Produce answers UNKNOWN_TOPIC_OR_PARTITION.
    with WireClient(broker.port) as c:
        resp = c.call("produce", 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": "never-asked-for", "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
        assert resp.responses[0].partition_responses[0].error_code.value == ErrorCodes["unknown_topic_or_partition"]
        meta = c.call("metadata", 12, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        assert "never-asked-for" not in {t.name for t in meta.topics}
