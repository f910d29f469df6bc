"""Request headers and bodies in, responses out: real bytes from kio and kafka-python."""

from __future__ import annotations

import datetime
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest as KafkaPythonApiVersionsRequest
from kafka.protocol.metadata import MetadataRequest as KafkaPythonMetadataRequest
from kafka.protocol.producer import ProduceRequest as KafkaPythonProduceRequest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v8.response import MetadataResponse as MetadataResponseV8
from kio.schema.metadata.v12 import response as metadata_v12_response
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from pulllog.net import (
    FrameDecoder,
    InvalidRequestError,
    ProtocolError,
    Request,
    RequestDecoder,
    UnknownApiKeyError,
    UnsupportedVersionError,
    api_versions_response,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_header_version,
    response_header_version,
)
from test_net_produce import produce_fields

SUPPORTED = {0: (3, 11), 1: (4, 13), 3: (0, 12), 18: (0, 3)}
DECODER = RequestDecoder(SUPPORTED)


def unframe(data: bytes | bytearray) -> bytes:
    (frame,) = FrameDecoder().feed(data)
    return frame


def body_frame(header: bytes, body: bytes) -> bytes:
    """A request frame (prefix stripped) from raw header and body bytes."""
    return header + body


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        return head + struct.pack(">h", -1)
    return head + struct.pack(">h", len(client_id)) + client_id


def header_v2(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    return header_v1(api_key, version, correlation_id, client_id) + b"\x00"


def millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


# --- header versions --------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [(18, 0, 1), (18, 2, 1), (18, 3, 2), (3, 8, 1), (3, 9, 2), (1, 11, 1), (1, 12, 2), (0, 9, 2)],
)
def test_request_header_version_follows_from_flexible_versions(
    api_key: int, version: int, expected: int
) -> None:
    assert request_header_version(api_key, version) == expected


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [(3, 8, 0), (3, 9, 1), (1, 11, 0), (1, 12, 1), (18, 0, 0), (18, 3, 0), (18, 4, 0)],
)
def test_response_header_version_is_always_0_for_api_versions(
    api_key: int, version: int, expected: int
) -> None:
    assert response_header_version(api_key, version) == expected


# --- request header round trips -------------------------------------------------


def test_header_v0_has_no_client_id() -> None:
    frame = struct.pack(">hhi", 7, 0, 42) + b"body"
    header, offset = parse_request_header(frame, 0)
    assert (header.api_key, header.api_version, header.correlation_id) == (7, 0, 42)
    assert header.client_id is None
    assert offset == 8


def test_header_v1_round_trip_through_kio_request() -> None:
    body = MetadataRequestV1(topics=(MetadataRequestTopicV1(name="orders"),))
    data = encode_request(body, correlation_id=7, client_id="console-consumer")
    assert data[4:30] == header_v1(3, 1, 7, b"console-consumer")
    request = DECODER.decode(unframe(data))
    assert request == Request(3, 1, 7, "console-consumer", body)


def test_header_v2_round_trip_through_kio_request() -> None:
    body = ApiVersionsRequestV3(client_software_name="pulllog", client_software_version="0.1.0")
    data = encode_request(body, correlation_id=2**31 - 1, client_id="é-client")
    request = DECODER.decode(unframe(data))
    assert request == Request(18, 3, 2**31 - 1, "é-client", body)


@pytest.mark.parametrize("client_id", [None, ""])
def test_null_and_empty_client_id_are_kept_apart(client_id: str | None) -> None:
    body = MetadataRequestV12(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    request = DECODER.decode(unframe(encode_request(body, correlation_id=1, client_id=client_id)))
    assert request.client_id == client_id
    assert request.body == body


def test_header_v2_tagged_fields_are_skipped() -> None:
    header = header_v1(18, 3, 5, b"cli") + b"\x02" + b"\x00\x01z" + b"\x07\x03abc"
    body = b"\x02a\x02b\x00"  # compact strings "a", "b", no tags
    request = DECODER.decode(header + body)
    assert request.client_id == "cli"
    assert request.body == ApiVersionsRequestV3(
        client_software_name="a", client_software_version="b"
    )


def test_client_id_is_a_legacy_string_even_in_header_v2() -> None:
    body = ApiVersionsRequestV3(client_software_name="x", client_software_version="y")
    data = encode_request(body, correlation_id=3, client_id="abc")
    assert data[4:] == header_v2(18, 3, 3, b"abc") + b"\x02x\x02y\x00"


# --- bytes from an independent client (kafka-python) --------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_api_versions_request(version: int) -> None:
    if version >= 3:
        message = KafkaPythonApiVersionsRequest[version](
            client_software_name="kafka-python", client_software_version="3.0.12"
        )
    else:
        message = KafkaPythonApiVersionsRequest[version]()
    message.with_header(correlation_id=11, client_id="kp")
    request = DECODER.decode(unframe(message.encode(header=True, framed=True)))
    assert (request.api_key, request.api_version, request.correlation_id) == (18, version, 11)
    assert request.client_id == "kp"
    if version >= 3:
        assert request.body.client_software_name == "kafka-python"
        assert request.body.client_software_version == "3.0.12"


@pytest.mark.parametrize("version", [0, 1, 4, 8, 9, 10, 12])
def test_kafka_python_metadata_request(version: int) -> None:
    topic_type = KafkaPythonMetadataRequest.MetadataRequestTopic
    fields = {"name": "orders"} if version < 10 else {"name": "orders", "topic_id": None}
    extra: dict[str, object] = {}
    if version >= 4:
        extra["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        extra["include_cluster_authorized_operations"] = False
    if version >= 8:
        extra["include_topic_authorized_operations"] = True
    message = KafkaPythonMetadataRequest[version](topics=[topic_type(**fields)], **extra)
    message.with_header(correlation_id=21, client_id=None)
    request = DECODER.decode(message.encode(header=True, framed=True)[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (3, version, 21)
    assert request.client_id is None
    assert [topic.name for topic in request.body.topics] == ["orders"]
    if version >= 8:
        assert request.body.include_topic_authorized_operations is True


def test_kafka_python_produce_request_v9() -> None:
    topic_type = KafkaPythonProduceRequest.TopicProduceData
    partition_type = topic_type.PartitionProduceData
    message = KafkaPythonProduceRequest[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[topic_type(name="t", partition_data=[partition_type(index=0, records=b"xyz")])],
    )
    message.with_header(correlation_id=9, client_id="producer-1")
    request = DECODER.decode(unframe(message.encode(header=True, framed=True)))
    assert produce_fields(request.body) == produce_fields(produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=millis(1500),
        topic_data=(
            produce_v9.TopicProduceData(
                name="t",
                partition_data=(produce_v9.PartitionProduceData(index=i32(0), records=b"xyz"),),
            ),
        ),
    ))


# --- refusals: unknown api key, unsupported version ----------------------------------


@pytest.mark.parametrize("api_key", [7, 99, 2, -1])
def test_unknown_api_key_carries_what_the_header_gave(api_key: int) -> None:
    frame = header_v1(api_key, 0, 77, b"who") + b"\x00\x00"
    with pytest.raises(UnknownApiKeyError) as caught:
        DECODER.decode(frame)
    error = caught.value
    assert (error.correlation_id, error.api_key, error.api_version) == (77, api_key, 0)
    assert error.client_id == "who"
    assert error.error_code is ErrorCode.invalid_request


@pytest.mark.parametrize("version", [3, 14, 999])
def test_fetch_version_outside_the_served_range(version: int) -> None:
    frame = header_v2(1, version, 5, b"c") + b"garbage that is never parsed"
    with pytest.raises(UnsupportedVersionError) as caught:
        DECODER.decode(frame)
    error = caught.value
    assert (error.correlation_id, error.api_key, error.api_version) == (5, 1, version)
    assert (error.min_version, error.max_version) == (4, 13)
    assert error.error_code is ErrorCode.unsupported_version
    assert "v4-v13" in str(error)


def test_newer_api_versions_request_is_refused_before_its_body_is_read() -> None:
    # KIP-511: a client may open with an ApiVersions version the broker has never
    # heard of; the header start still yields what we need to answer with v0.
    frame = header_v2(18, 9, 1234, b"librdkafka") + b"\x0bunknown body layout\xff"
    with pytest.raises(UnsupportedVersionError) as caught:
        DECODER.decode(frame)
    assert (caught.value.correlation_id, caught.value.api_key, caught.value.api_version) == (
        1234,
        18,
        9,
    )
    assert caught.value.client_id == "librdkafka"


def test_supported_table_must_match_kio() -> None:
    with pytest.raises(ValueError, match="Fetch v3"):
        RequestDecoder({1: (3, 13)})
    with pytest.raises(ValueError, match="bad version range"):
        RequestDecoder({1: (13, 4)})


# --- requests that do not decode --------------------------------------------------


@pytest.mark.parametrize("frame", [b"", b"\x00\x12", b"\x00\x12\x00\x03\x00\x00\x00"])
def test_frame_shorter_than_the_header_start(frame: bytes) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        DECODER.decode(frame)
    assert caught.value.correlation_id is None


@pytest.mark.parametrize(
    "header",
    [
        struct.pack(">hhi", 3, 1, 8),  # no client id length
        struct.pack(">hhih", 3, 1, 8, 10) + b"short",  # client id runs past the end
        struct.pack(">hhih", 3, 1, 8, -2),  # negative length other than -1
        struct.pack(">hhih", 3, 1, 8, 2) + b"\xff\xfe",  # not UTF-8
        struct.pack(">hhih", 18, 3, 8, -1) + b"\x01\x00\x09ab",  # header tag runs past
    ],
)
def test_bad_header_keeps_the_correlation_id(header: bytes) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        DECODER.decode(header)
    assert caught.value.correlation_id == 8
    assert caught.value.error_code is ErrorCode.invalid_request


def test_truncated_body() -> None:
    body = MetadataRequestV1(topics=(MetadataRequestTopicV1(name="orders"),))
    frame = unframe(encode_request(body, correlation_id=4, client_id="c"))
    with pytest.raises(InvalidRequestError) as caught:
        DECODER.decode(frame[:-1])
    assert (caught.value.correlation_id, caught.value.api_key, caught.value.api_version) == (
        4,
        3,
        1,
    )
    assert caught.value.client_id == "c"


def test_trailing_bytes_after_the_body_are_refused() -> None:
    body = ApiVersionsRequestV0()
    frame = unframe(encode_request(body, correlation_id=4, client_id="c"))
    assert DECODER.decode(frame).body == body
    with pytest.raises(InvalidRequestError, match="unexpected bytes after the body"):
        DECODER.decode(frame + b"\x00")


def test_null_where_the_schema_allows_none() -> None:
    # ApiVersions v3 client_software_name is a non-nullable compact string: 0 = null.
    with pytest.raises(InvalidRequestError, match="does not decode"):
        DECODER.decode(header_v2(18, 3, 1, b"c") + b"\x00\x02b\x00")


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (12, b"\xff\xff\xff\xff\x0f\x00\x00"),  # compact array of 2**32 - 2 topics
        (1, b"\x7f\xff\xff\xff"),  # legacy array of 2**31 - 1 topics
    ],
)
def test_huge_declared_array_is_refused_without_allocating_it(version: int, body: bytes) -> None:
    # kio's native reader sizes the array up front: 2**32 entries is a 32 GiB request
    # and a Rust abort of the whole broker. The structural guard must catch it first.
    header = header_v2(3, version, 6, b"c") if version >= 9 else header_v1(3, version, 6, b"c")
    with pytest.raises(InvalidRequestError, match="array"):
        DECODER.decode(header + body)


# --- unknown tagged fields are ignored (KIP-482) -------------------------------------


def test_unknown_tagged_field_in_the_body_is_ignored() -> None:
    body = b"\x02a\x02b" + b"\x01" + b"\x63\x03xyz"  # tag 99, 3 bytes
    request = DECODER.decode(header_v2(18, 3, 1, b"c") + body)
    assert request.body == ApiVersionsRequestV3(
        client_software_name="a", client_software_version="b"
    )


def test_unknown_tag_nested_in_a_known_tagged_struct_is_ignored() -> None:
    decoder = RequestDecoder({1: (15, 15)})
    base = fetch_v15.FetchRequest(
        max_wait=millis(500),
        min_bytes=i32(1),
        topics=(),
        forgotten_topics_data=(),
    )
    plain = unframe(encode_request(base, correlation_id=1, client_id="c"))
    assert plain.endswith(b"\x00")  # empty top-level tag buffer
    replica_state = struct.pack(">iq", 3, 7) + b"\x01" + b"\x63\x02xy"  # + unknown tag 99
    tags = (
        b"\x02"  # two tagged fields
        + b"\x01"
        + bytes([len(replica_state)])
        + replica_state  # tag 1: ReplicaState
        + b"\x05\x01!"  # tag 5: unknown
    )
    request = decoder.decode(plain[:-1] + tags)
    assert request.body == fetch_v15.FetchRequest(
        max_wait=millis(500),
        min_bytes=i32(1),
        topics=(),
        forgotten_topics_data=(),
        replica_state=fetch_v15.ReplicaState(replica_id=i32(3), replica_epoch=i64(7)),
    )


def test_known_tagged_field_that_does_not_fill_its_size_is_refused() -> None:
    decoder = RequestDecoder({1: (15, 15)})
    base = fetch_v15.FetchRequest(
        max_wait=millis(500), min_bytes=i32(1), topics=(), forgotten_topics_data=()
    )
    plain = unframe(encode_request(base, correlation_id=1, client_id="c"))
    replica_state = struct.pack(">iq", 3, 7) + b"\x00" + b"?"  # one byte too many
    tags = b"\x01\x01" + bytes([len(replica_state)]) + replica_state
    with pytest.raises(InvalidRequestError, match="does not fill"):
        decoder.decode(plain[:-1] + tags)


# --- responses -------------------------------------------------------------------


def metadata_v12_response_body() -> metadata_v12_response.MetadataResponse:
    return metadata_v12_response.MetadataResponse(
        throttle_time=millis(0),
        brokers=(
            metadata_v12_response.MetadataResponseBroker(node_id=i32(1), host="h", port=i32(9092)),
        ),
        cluster_id="c",
        controller_id=i32(1),
        topics=(),
    )


def test_flexible_response_uses_header_v1() -> None:
    data = encode_response(77, metadata_v12_response_body())
    (size, correlation_id) = struct.unpack_from(">ii", data)
    assert size == len(data) - 4
    assert correlation_id == 77
    assert data[8] == 0  # empty header tag buffer
    assert decode_response(data[4:], metadata_v12_response.MetadataResponse) == (
        77,
        metadata_v12_response_body(),
    )


def test_non_flexible_response_uses_header_v0() -> None:
    body = MetadataResponseV8(
        throttle_time=millis(5), brokers=(), cluster_id=None, controller_id=i32(-1), topics=()
    )
    data = encode_response(3, body)
    assert data[:8] == struct.pack(">ii", len(data) - 4, 3)
    assert data[8:12] == struct.pack(">i", 5)  # throttle_time_ms right after the header
    assert decode_response(data[4:], MetadataResponseV8) == (3, body)


def test_api_versions_v3_response_uses_header_v0() -> None:
    body = api_versions_response(3, SUPPORTED)
    data = encode_response(9, body)
    assert data[4:8] == struct.pack(">i", 9)
    assert data[8:10] == b"\x00\x00"  # error_code follows the correlation id directly
    assert decode_response(data[4:], type(body)) == (9, body)


def test_request_decoder_raises_only_protocol_errors_for_assorted_garbage() -> None:
    for frame in (b"\xff" * 8, b"\x00" * 9, b"\x00\x00\x00\x00" + b"\xff" * 50):
        with pytest.raises(ProtocolError):
            DECODER.decode(frame)


def test_a_one_record_produce_v9_decodes_to_the_fields_it_was_built_from() -> None:
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=millis(30000),
        topic_data=(
            produce_v9.TopicProduceData(
                name="events",
                partition_data=(produce_v9.PartitionProduceData(index=i32(0), records=b"r" * 120),),
            ),
        ),
    )
    frame = unframe(encode_request(body, correlation_id=1, client_id="producer"))
    # (its cost is measured by scripts/bench_broker_request.py, not asserted here)
    assert produce_fields(DECODER.decode(frame).body) == produce_fields(body)


def test_isolation_level_and_other_int8_fields_survive_the_guard() -> None:
    decoder = RequestDecoder({1: (15, 15)})
    body = fetch_v15.FetchRequest(
        max_wait=millis(500),
        min_bytes=i32(1),
        isolation_level=i8(1),
        topics=(),
        forgotten_topics_data=(),
        rack_id="rack-a",
    )
    assert (
        decoder.decode(unframe(encode_request(body, correlation_id=1, client_id=None))).body == body
    )
