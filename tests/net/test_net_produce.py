"""The hand-written Produce encoders write exactly what kio writes, every version."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from pulllog.net.build import build, request_class, response_class
from pulllog.net.guard import MalformedError
from pulllog.net.produce import (
    PartitionProduceResponse,
    ProduceRequestEncoder,
    TopicProduceResponse,
    decode_produce_response,
    encode_produce_frame,
    encode_produce_response,
)
from pulllog.net.protocol import RequestDecoder, decode_response, encode_request, encode_response

VERSIONS = range(3, 10)

TOPICS = [
    TopicProduceResponse("events", [
        PartitionProduceResponse(0, 0, base_offset=1234567890123, log_start_offset=17),
        PartitionProduceResponse(1, ErrorCode.invalid_record.value, error_message="2 record(s) without a key",
                                 record_errors=[(0, "no key"), (3, None)]),
    ]),
    TopicProduceResponse("logs-ü", [
        PartitionProduceResponse(0, 0, base_offset=5, log_append_time_ms=1_700_000_000_123, log_start_offset=0),
    ]),
    TopicProduceResponse("empty", []),
    TopicProduceResponse("long-message", [  # lengths past one varint byte
        PartitionProduceResponse(2, ErrorCode.message_too_large.value, error_message="m" * 300),
    ]),
]


def _kio_bytes(version: int, correlation_id: int, topics: list[TopicProduceResponse], throttle_ms: int) -> bytes:
    data = {"throttle_time": throttle_ms, "responses": [
        {"name": t.name, "partition_responses": [
            {"index": p.index, "error_code": p.error_code, "base_offset": p.base_offset,
             "log_append_time": None if p.log_append_time_ms < 0 else datetime.datetime.fromtimestamp(
                 p.log_append_time_ms / 1000, datetime.UTC),
             "log_start_offset": p.log_start_offset,
             "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in p.record_errors],
             "error_message": p.error_message}
            for p in t.partitions]}
        for t in topics]}
    return encode_response(correlation_id, build(response_class("produce", version), data))


@pytest.mark.parametrize("version", VERSIONS)
def test_matches_kio_byte_for_byte(version: int) -> None:
    assert encode_produce_response(42, version, TOPICS, 7) == _kio_bytes(version, 42, TOPICS, 7)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_one_partition_answer_decodes_with_kio(version: int) -> None:
    frame = encode_produce_response(-5, version, [TopicProduceResponse("t", [PartitionProduceResponse(0, 0, 99)])])

    correlation_id, body = decode_response(frame[4:], response_class("produce", version))

    assert correlation_id == -5
    assert [(t.name, int(p.index), int(p.base_offset)) for t in body.responses for p in t.partition_responses] \
        == [("t", 0, 99)]


def test_versions_outside_3_to_9_are_refused() -> None:
    with pytest.raises(ValueError, match="v10"):
        encode_produce_response(1, 10, [])


# ---------------------------------------------------------------------------- requests (client side)


def _kio_request_bytes(body: object, correlation_id: int, client_id: str | None) -> bytes:
    """What encode_request wrote before Produce was encoded by hand: kio's generic writer."""
    import io
    import struct

    from kio.serial import entity_writer

    buffer = io.BytesIO()
    buffer.write(struct.pack(">hhi", 0, body.__version__, correlation_id))
    buffer.write(struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode())
    if body.__version__ >= 9:
        buffer.write(b"\x00")
    entity_writer(type(body))(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _request(version: int, transactional_id: str | None) -> object:
    return build(request_class("produce", version), {
        "transactional_id": transactional_id, "acks": -1, "timeout": 30_000,
        "topic_data": [
            {"name": "events", "partition_data": [{"index": 0, "records": b"\x01" * 300},
                                                  {"index": 7, "records": None}]},
            {"name": "t" * 200, "partition_data": [{"index": 2, "records": b""}]},
            {"name": "none", "partition_data": []},
        ]})


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("client_id", [None, "pulllog-producer"])
def test_requests_match_kio_byte_for_byte(version: int, transactional_id: str | None, client_id: str | None) -> None:
    body = _request(version, transactional_id)

    assert encode_request(body, correlation_id=77, client_id=client_id) == _kio_request_bytes(body, 77, client_id)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_hand_encoded_request_decodes_as_the_same_request(version: int) -> None:
    body = _request(version, "tx")
    decoder = RequestDecoder({0: (3, 9)})

    request = decoder.decode(encode_request(body, correlation_id=3, client_id="c")[4:])

    assert (request.api_version, request.correlation_id, request.client_id) == (version, 3, "c")
    assert produce_fields(request.body) == produce_fields(body)


def produce_fields(body: object) -> tuple[object, ...]:
    """A Produce body, kio's entity or the broker's hand-decoded tuple, as plain values."""
    timeout = getattr(body, "timeout", None)
    timeout_ms = round(timeout.total_seconds() * 1000) if timeout is not None else body.timeout_ms  # type: ignore[attr-defined]
    topics = body.topic_data  # type: ignore[attr-defined]
    return (body.transactional_id, body.acks, timeout_ms,  # type: ignore[attr-defined]
            None if topics is None else [
                (t.name, None if t.partition_data is None else [(p.index, p.records) for p in t.partition_data])
                for t in topics])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "pulllog-producer"])
def test_the_senders_frame_from_plain_values_matches_kio(version: int, client_id: str | None) -> None:
    body = _request(version, None)
    topic_data = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in body.topic_data]

    frame = encode_produce_frame(version, 77, client_id, None, body.acks, round(body.timeout.total_seconds() * 1000),
                                 topic_data)

    assert frame == _kio_request_bytes(body, 77, client_id)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "pulllog-producer"])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("records", [b"", b"\x02" * 90, b"\x03" * 300, b"\x04" * 126, b"\x04" * 127,
                                     b"\x05" * 16382, b"\x05" * 16383, b"\x06" * 20_000],
                         ids=["empty", "short", "long", "1-byte-length-max", "2-byte-length-min",
                              "2-byte-length-max", "3-byte-length-min", "longer"])
def test_the_one_partition_fast_path_matches_the_generic_encoder(
        version: int, client_id: str | None, transactional_id: str | None, records: bytes) -> None:
    encoder = ProduceRequestEncoder(version, client_id, transactional_id, 1, 30_000)
    generic = encode_produce_frame(version, 2**31 - 1, client_id, transactional_id, 1, 30_000,
                                   [("t" * 130, [(11, records)])])

    for _ in range(2):  # the second frame comes from the topic's cached prefix
        assert encoder.one_partition_frame(2**31 - 1, "t" * 130, 11, records) == generic
        assert encoder.frame(2**31 - 1, [("t" * 130, [(11, records)])]) == generic


@pytest.mark.parametrize("version", VERSIONS)
def test_the_encoder_falls_back_to_the_generic_frame_for_several_partitions(version: int) -> None:
    body = _request(version, "tx")
    topic_data = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in body.topic_data]
    encoder = ProduceRequestEncoder(version, "c", "tx", body.acks, round(body.timeout.total_seconds() * 1000))

    assert encoder.frame(5, topic_data) == _kio_request_bytes(body, 5, "c")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_response_decodes_to_what_kio_encoded(version: int) -> None:
    frame = _kio_bytes(version, 42, TOPICS, 7)[4:]

    correlation_id, topics, throttle_ms = decode_produce_response(frame, version)

    assert (correlation_id, throttle_ms) == (42, 7)
    expected = [(t.name, [p._replace(
        log_start_offset=p.log_start_offset if version >= 5 else -1,
        record_errors=list(p.record_errors) if version >= 8 else [],
        error_message=p.error_message if version >= 8 else None) for p in t.partitions]) for t in TOPICS]
    assert [(t.name, list(t.partitions)) for t in topics] == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncated_response_is_malformed_not_a_crash(version: int) -> None:
    frame = encode_produce_response(9, version, TOPICS)[4:]

    for cut in range(len(frame)):
        with pytest.raises(MalformedError):
            decode_produce_response(frame[:cut], version)
    with pytest.raises(MalformedError, match="unexpected bytes"):
        decode_produce_response(frame + b"\x00", version)


def _answer(version: int, topics: list[TopicProduceResponse], throttle_ms: int = 0) -> bytes:
    return encode_produce_response(7, version, topics, throttle_ms)[4:]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("partition", [
    PartitionProduceResponse(3, 0, base_offset=2**40, log_start_offset=5),
    PartitionProduceResponse(3, ErrorCode.not_leader_or_follower.value),
    PartitionProduceResponse(3, 0, base_offset=9, log_append_time_ms=1_700_000_000_123),
], ids=["appended", "error-without-message", "log-append-time"])
def test_the_one_partition_answer_fast_path_reads_what_the_generic_decoder_reads(
        version: int, partition: PartitionProduceResponse) -> None:
    encoder = ProduceRequestEncoder(version, "c", None, 1, 1000)
    frame = _answer(version, [TopicProduceResponse("t" * 130, [partition])], throttle_ms=250)

    fast = encoder.one_partition_answer(frame, "t" * 130)

    (generic,) = decode_produce_response(frame, version)[1][0].partitions
    assert fast is not None
    assert fast._replace(record_errors=list(fast.record_errors)) == generic


def _other_shapes(version: int, one: list[PartitionProduceResponse]) -> list[bytes]:
    """Answers near the one-partition shape for "topic" that are not it."""
    return [
        _answer(version, [TopicProduceResponse("other", one)]),  # another topic of the same length
        _answer(version, [TopicProduceResponse("topic", one * 2)]),
        _answer(version, [TopicProduceResponse("topic", one), TopicProduceResponse("more", one)]),
        _answer(version, [TopicProduceResponse("topic", one)])[:-1],
        _answer(version, [TopicProduceResponse("topic", one)]) + b"\x00",
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_of_another_shape_is_left_to_the_generic_decoder(version: int) -> None:
    encoder = ProduceRequestEncoder(version, "c", None, 1, 1000)
    one = [PartitionProduceResponse(0, 0, 5)]
    others = _other_shapes(version, one)
    if version >= 8:  # the fields an error may fill
        others.append(_answer(version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 87, error_message="no")])]))
        others.append(_answer(version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 87, record_errors=[(0, None)])])]))

    for frame in others:
        assert encoder.one_partition_answer(frame, "topic") is None


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("partition", [
    PartitionProduceResponse(3, 0, base_offset=9),
    PartitionProduceResponse(3, 0, base_offset=2**40, log_append_time_ms=1_700_000_000_123),
    PartitionProduceResponse(3, ErrorCode.not_leader_or_follower.value),
    PartitionProduceResponse(4, 0, base_offset=9),
], ids=["appended", "log-append-time", "error", "another-partition"])
def test_the_acknowledgement_fast_path_agrees_with_the_generic_decoder(
        version: int, partition: PartitionProduceResponse) -> None:
    """The producer's hot path (one_partition_ack) reads an error-free answer for its
    partition as the generic decoder does, and leaves anything else to the slower paths."""
    encoder = ProduceRequestEncoder(version, "c", None, 1, 1000)
    frame = _answer(version, [TopicProduceResponse("t" * 130, [partition])], throttle_ms=250)

    ack = encoder.one_partition_ack(frame, "t" * 130, 3)

    (generic,) = decode_produce_response(frame, version)[1][0].partitions
    if generic.error_code == 0 and generic.index == 3:
        assert ack == (generic.base_offset, generic.log_append_time_ms)
    else:
        assert ack is None


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_of_another_shape_is_no_acknowledgement_on_the_fast_path(version: int) -> None:
    encoder = ProduceRequestEncoder(version, "c", None, 1, 1000)
    one = [PartitionProduceResponse(0, 0, 5)]
    others = _other_shapes(version, one)
    if version >= 8:  # fields an answer may fill, error or not
        others.append(_answer(version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 0, 5, error_message="no")])]))
        others.append(_answer(version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 0, 5, record_errors=[(0, None)])])]))

    assert encoder.one_partition_ack(_answer(version, [TopicProduceResponse("topic", one)]), "topic", 0) == (5, -1)
    for frame in others:
        assert encoder.one_partition_ack(frame, "topic", 0) is None
