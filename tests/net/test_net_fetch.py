"""Zero-copy Fetch responses: chunks with FileSlices must equal kio's all-bytes encoding."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import struct
import uuid
from types import ModuleType
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchResponse as KafkaPythonFetchResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from pulllog.net import (
    FETCH_MAX_VERSION,
    FETCH_MIN_VERSION,
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponseData,
    FetchTopicResponse,
    FileSlice,
    decode_response,
    encode_fetch_response,
    encode_response,
    materialize,
    wire_size,
)

VERSIONS = range(FETCH_MIN_VERSION, FETCH_MAX_VERSION + 1)

# Two in-memory "segment files"; slices point into them.
SEGMENTS = {
    "00000000000000000000.log": bytes(range(256)) * 100,
    "00000000000000012345.log": b"\xab" * 300,
}
ORDERS_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
EMPTY_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")


def read_segment(piece: FileSlice) -> bytes:
    data = SEGMENTS[str(piece.file)]
    return data[piece.position : piece.position + piece.length]


def sample(records_as_slices: bool) -> FetchResponseData:
    """Every shape the encoder must get right: slices and bytes, short and multi-byte
    lengths (uvarints > 127), null and empty records, null and present aborted lists."""

    def records(file: str, position: int, length: int) -> bytes | FileSlice:
        piece = FileSlice(file, position, length)
        return piece if records_as_slices else read_segment(piece)

    return FetchResponseData(
        throttle_time_ms=12,
        error_code=0,
        session_id=1234,
        topics=(
            FetchTopicResponse(
                name="orders",
                topic_id=ORDERS_ID,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=0,
                        high_watermark=500,
                        last_stable_offset=480,
                        log_start_offset=7,
                        aborted_transactions=(AbortedTransaction(42, 470),),
                        preferred_read_replica=-1,
                        records=records("00000000000000000000.log", 1000, 20000),
                    ),
                    FetchPartitionResponse(
                        partition_index=1,
                        error_code=ErrorCode.offset_out_of_range,
                        high_watermark=9,
                        last_stable_offset=9,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=None,
                    ),
                    FetchPartitionResponse(
                        partition_index=2,
                        high_watermark=12500,
                        last_stable_offset=12500,
                        log_start_offset=12345,
                        aborted_transactions=(),
                        preferred_read_replica=3,
                        records=records("00000000000000012345.log", 10, 5),
                    ),
                ),
            ),
            FetchTopicResponse(name="empty", topic_id=EMPTY_ID, partitions=()),
            FetchTopicResponse(
                name="tail",
                topic_id=ORDERS_ID,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=9,
                        high_watermark=1,
                        records=records("00000000000000012345.log", 0, 300),
                    ),
                ),
            ),
        ),
    )


def kio_module(version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.fetch.v{version}.response")


def build(cls: type, **values: Any) -> Any:
    """A kio entity from the values its version has (fields come and go by version)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


def as_kio(version: int, data: FetchResponseData) -> Any:
    """The same response built as kio entities: the all-bytes oracle."""
    module = kio_module(version)

    def partition(p: FetchPartitionResponse) -> Any:
        aborted = p.aborted_transactions
        assert not isinstance(p.records, FileSlice)
        return build(
            module.PartitionData,
            partition_index=p.partition_index,
            error_code=ErrorCode(p.error_code),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=None
            if aborted is None
            else tuple(
                build(
                    module.AbortedTransaction,
                    producer_id=a.producer_id,
                    first_offset=a.first_offset,
                )
                for a in aborted
            ),
            preferred_read_replica=p.preferred_read_replica,
            records=p.records,
        )

    topics = tuple(
        build(
            module.FetchableTopicResponse,
            topic=t.name,
            topic_id=t.topic_id,
            partitions=tuple(partition(p) for p in t.partitions),
        )
        for t in data.topics
    )
    return build(
        module.FetchResponse,
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=data.throttle_time_ms)),
        error_code=ErrorCode(data.error_code),
        session_id=data.session_id,
        responses=topics,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_response_materializes_to_kios_all_bytes_encoding(version: int) -> None:
    chunks = encode_fetch_response(31, version, sample(records_as_slices=True))
    wire = materialize(chunks, read_segment)
    expected = encode_response(31, as_kio(version, sample(records_as_slices=False)))
    assert wire == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_and_inline_records_encode_identically(version: int) -> None:
    sliced = materialize(encode_fetch_response(8, version, sample(True)), read_segment)
    inline = encode_fetch_response(8, version, sample(False))
    assert len(inline) == 1 and type(inline[0]) is bytes
    assert sliced == inline[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_kio_reader_decodes_the_materialized_frame(version: int) -> None:
    wire = materialize(encode_fetch_response(77, version, sample(True)), read_segment)
    (size,) = struct.unpack_from(">i", wire)
    assert size == len(wire) - 4
    response_type = type(as_kio(version, sample(False)))
    correlation_id, body = decode_response(wire[4:], response_type)
    assert correlation_id == 77
    assert body == as_kio(version, sample(False))


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_python_decodes_the_materialized_frame(version: int) -> None:
    wire = materialize(encode_fetch_response(5, version, sample(True)), read_segment)
    decoded = KafkaPythonFetchResponse.decode(wire, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 5
    assert decoded.throttle_time_ms == 12
    first = decoded.responses[0]
    if version >= 13:
        assert first.topic_id == ORDERS_ID
    else:
        assert first.topic == "orders"
    partitions = first.partitions
    assert [p.partition_index for p in partitions] == [0, 1, 2]
    assert partitions[1].error_code == ErrorCode.offset_out_of_range
    assert bytes(partitions[0].records) == SEGMENTS["00000000000000000000.log"][1000:21000]
    assert partitions[1].records is None
    assert bytes(partitions[2].records) == b"\xab" * 5


def test_chunks_alternate_bytes_and_the_very_slices_given() -> None:
    data = sample(True)
    chunks = encode_fetch_response(1, 12, data)
    slices = [chunk for chunk in chunks if isinstance(chunk, FileSlice)]
    given = [
        p.records for t in data.topics for p in t.partitions if isinstance(p.records, FileSlice)
    ]
    assert slices == given
    assert all(a is b for a, b in zip(slices, given, strict=True))
    kinds = [isinstance(chunk, FileSlice) for chunk in chunks]
    assert kinds == [False, True, False, True, False, True, False]
    assert wire_size(chunks) == len(materialize(chunks, read_segment))


def test_response_ending_in_a_slice_has_no_empty_trailing_chunk() -> None:
    # Non-flexible versions end with the last records field: nothing follows the slice.
    piece = FileSlice("00000000000000012345.log", 0, 10)
    data = FetchResponseData(
        topics=(
            FetchTopicResponse(name="t", partitions=(FetchPartitionResponse(0, records=piece),)),
        )
    )
    chunks = encode_fetch_response(1, 11, data)
    assert chunks[-1] is piece
    assert all(len(chunk) for chunk in chunks if isinstance(chunk, bytes))


def test_size_prefix_counts_slice_lengths_without_reading_them() -> None:
    piece = FileSlice(17, 0, 1_000_000)  # an fd; never read here
    data = FetchResponseData(
        topics=(
            FetchTopicResponse(name="t", partitions=(FetchPartitionResponse(0, records=piece),)),
        )
    )
    chunks = encode_fetch_response(1, 4, data)
    head = chunks[0]
    assert isinstance(head, bytes)
    (size,) = struct.unpack_from(">i", head)
    assert size == wire_size(chunks) - 4
    assert head[-4:] == struct.pack(">i", 1_000_000)  # legacy records length


def test_flexible_records_length_is_a_uvarint_of_length_plus_one() -> None:
    piece = FileSlice("f", 0, 300)  # 301 = 0xad 0x02
    data = FetchResponseData(
        topics=(
            FetchTopicResponse(
                topic_id=ORDERS_ID, partitions=(FetchPartitionResponse(0, records=piece),)
            ),
        )
    )
    head = encode_fetch_response(1, 13, data)[0]
    assert isinstance(head, bytes) and head.endswith(b"\xad\x02")


def test_empty_slice_is_sent_as_empty_records() -> None:
    data = FetchResponseData(
        topics=(
            FetchTopicResponse(
                name="t", partitions=(FetchPartitionResponse(0, records=FileSlice("f", 5, 0)),)
            ),
        )
    )
    chunks = encode_fetch_response(1, 12, data)
    assert len(chunks) == 1
    assert chunks == encode_fetch_response(
        1,
        12,
        dataclasses.replace(
            data,
            topics=(
                FetchTopicResponse(name="t", partitions=(FetchPartitionResponse(0, records=b""),)),
            ),
        ),
    )


def test_short_read_is_refused_because_the_size_is_already_promised() -> None:
    chunks = encode_fetch_response(1, 12, sample(True))
    with pytest.raises(ValueError, match="segment changed"):
        materialize(chunks, lambda piece: read_segment(piece)[:-1])


def test_v13_needs_topic_ids() -> None:
    data = FetchResponseData(topics=(FetchTopicResponse(name="orders"),))
    with pytest.raises(ValueError, match="topic_id"):
        encode_fetch_response(1, 13, data)


@pytest.mark.parametrize("version", [3, 19])
def test_versions_outside_4_to_18_are_refused(version: int) -> None:
    with pytest.raises(ValueError, match="not encodable"):
        encode_fetch_response(1, version, FetchResponseData())


@pytest.mark.parametrize(("position", "length"), [(-1, 0), (0, -1), (0, 2**31)])
def test_file_slice_rejects_impossible_ranges(position: int, length: int) -> None:
    with pytest.raises(ValueError):
        FileSlice("f", position, length)


# ---------------------------------------------------------------------------- the request (client side)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pulllog.net.build import build as build_entity  # noqa: E402
from pulllog.net.build import request_class  # noqa: E402
from pulllog.net.fetch import FETCH_REQUEST_MAX_VERSION, FETCH_REQUEST_MIN_VERSION, encode_fetch_request  # noqa: E402
from pulllog.net.protocol import encode_request  # noqa: E402

int32 = st.integers(-(2**31), 2**31 - 1)
fetch_topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=150),
              st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=4)),
    max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.integers(FETCH_REQUEST_MIN_VERSION, FETCH_REQUEST_MAX_VERSION), int32, st.one_of(st.none(), st.text(max_size=30)),
       int32, int32, int32, st.sampled_from([0, 1]), int32, fetch_topics)
def test_hand_encoded_fetch_request_is_kios_encoding(version, correlation_id, client_id, max_wait_ms, min_bytes,
                                                     max_bytes, isolation_level, partition_max_bytes, topics) -> None:
    kio_frame = encode_request(build_entity(request_class("fetch", version), {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes,
             "current_leader_epoch": -1, "log_start_offset": -1} for p, offset in partitions]}
            for topic, partitions in topics],
        "forgotten_topics_data": [], "rack_id": ""}), correlation_id=correlation_id, client_id=client_id)
    assert encode_fetch_request(
        version, correlation_id, client_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, topics=topics, partition_max_bytes=partition_max_bytes) == kio_frame


def test_fetch_request_outside_the_encodable_versions_is_refused() -> None:
    for version in (FETCH_REQUEST_MIN_VERSION - 1, FETCH_REQUEST_MAX_VERSION + 1):
        with pytest.raises(ValueError, match="not encodable"):
            encode_fetch_request(version, 1, "c", max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=0,
                                 topics=[], partition_max_bytes=1)


# ---------------------------------------------------------------- decoding v12 (the replica fetcher's)


def test_the_v12_decoder_reads_what_the_encoder_wrote_with_records_as_views_of_the_frame() -> None:
    from pulllog.net.fetch import decode_fetch_response
    from pulllog.net.guard import MalformedError

    written = FetchResponseData(7, 0, 0, [
        FetchTopicResponse(name="orders", partitions=[
            FetchPartitionResponse(0, 0, 10, 9, 2, None, -1, b"x" * 300),
            FetchPartitionResponse(1, ErrorCode.not_leader_or_follower.value, -1, -1, -1, [], -1, None)]),
        FetchTopicResponse(name="t\u00e9", partitions=[
            FetchPartitionResponse(3, 0, 5, 4, 0, [AbortedTransaction(11, 1), AbortedTransaction(12, 3)], -1, b"")])])
    frame = bytearray(b"".join(encode_fetch_response(99, 12, written))[4:])
    correlation_id, read = decode_fetch_response(frame)
    assert correlation_id == 99
    records = read.topics[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is frame  # a view, not a copy
    as_bytes = dataclasses.replace(read, topics=[
        dataclasses.replace(t, partitions=[dataclasses.replace(p, records=None if p.records is None else bytes(p.records))
                                           for p in t.partitions]) for t in read.topics])
    assert as_bytes == dataclasses.replace(written, topics=[
        dataclasses.replace(t, partitions=list(t.partitions)) for t in written.topics])
    for cut in range(len(frame)):  # every truncation is refused, never read past the end
        with pytest.raises(MalformedError):
            decode_fetch_response(frame[:cut])
    with pytest.raises(MalformedError):
        decode_fetch_response(frame + b"\x00")
