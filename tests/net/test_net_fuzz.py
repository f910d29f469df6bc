"""Whatever bytes a peer sends, the wire layer raises ProtocolError subclasses only.

A crash here is worse than a failed assertion: before the structural guard, one frame
of this kind aborted the interpreter inside kio's native reader. The decoder under
test serves every api and version kio has, so every schema is in reach.
"""

from __future__ import annotations

import contextlib
import datetime
import struct
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v12 import response as metadata_v12_response
from kio.schema.produce.v9 import request as produce_v9
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64
from test_net_produce import _request, produce_fields

from pulllog.net import (
    FrameDecoder,
    InvalidResponseError,
    ProtocolError,
    RequestDecoder,
    RequestError,
    decode_response,
    encode_request,
    frame,
)
from pulllog.net.protocol import _kio_body_reader, parse_request_header, request_header_version

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def every_kio_request_version() -> dict[int, tuple[int, int]]:
    table = {}
    for api_key, name in api_key_map.items():
        versions = sorted(v for v, e in schema_name_map[name].items() if EntityType.request in e)
        if versions:
            assert versions == list(range(versions[0], versions[-1] + 1))
            table[api_key] = (versions[0], versions[-1])
    return table


TABLE = every_kio_request_version()
DECODER = RequestDecoder(TABLE)
SERVED = sorted(
    (key, version) for key, (low, high) in TABLE.items() for version in range(low, high + 1)
)


def millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


CORPUS = [
    encode_request(
        ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7.1"),
        correlation_id=1,
        client_id="rdkafka",
    )[4:],
    encode_request(
        MetadataRequestV1(topics=(MetadataRequestTopicV1(name="orders"),)),
        correlation_id=2,
        client_id=None,
    )[4:],
    encode_request(
        produce_v9.ProduceRequest(
            transactional_id="tx-1",
            acks=i16(-1),
            timeout=millis(30000),
            topic_data=(
                produce_v9.TopicProduceData(
                    name="events",
                    partition_data=(
                        produce_v9.PartitionProduceData(index=i32(0), records=b"\x00" * 70),
                        produce_v9.PartitionProduceData(index=i32(1), records=None),
                    ),
                ),
            ),
        ),
        correlation_id=3,
        client_id="producer",
    )[4:],
    encode_request(
        fetch_v15.FetchRequest(
            max_wait=millis(500),
            min_bytes=i32(1),
            cluster_id="cluster",
            replica_state=fetch_v15.ReplicaState(replica_id=i32(1), replica_epoch=i64(2)),
            topics=(
                fetch_v15.FetchTopic(
                    topic_id=uuid.UUID(int=7),
                    partitions=(
                        fetch_v15.FetchPartition(
                            partition=i32(0), fetch_offset=i64(5), partition_max_bytes=i32(1 << 20)
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(
                fetch_v15.ForgottenTopic(topic_id=uuid.UUID(int=8), partitions=(i32(1), i32(2))),
            ),
        ),
        correlation_id=4,
        client_id="consumer",
    )[4:],
]


def test_corpus_decodes() -> None:
    for request in CORPUS:
        DECODER.decode(request)


def decode_only_protocol_errors(data: bytes) -> None:
    # RequestError is the only allowed failure; anything else propagates and fails.
    with contextlib.suppress(RequestError):
        DECODER.decode(data)


# Bytes that make lengths interesting: 0, null markers, huge, varint continuation.
interesting_bytes = st.binary(max_size=80) | st.lists(
    st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0x0F]), max_size=80
).map(bytes)


def mutate(frame: bytes, data: st.DataObject, *, edits: tuple[int, int], keep: int = 0) -> bytes:
    """``frame`` after between ``edits[0]`` and ``edits[1]`` random edits at or after byte
    ``keep``: a byte set to a varint- or sign-interesting value, bytes inserted or deleted,
    or the rest cut off."""
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(*edits))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        position = data.draw(st.integers(keep, max(len(mutated) - 1, keep)))
        if kind == "flip" and position < len(mutated):
            mutated[position] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, position & 0xFF]))
        elif kind == "insert":
            mutated[position:position] = data.draw(st.binary(min_size=1, max_size=6))
        elif kind == "delete":
            del mutated[position : position + data.draw(st.integers(1, 6))]
        else:
            del mutated[position:]
    return bytes(mutated)


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(0, 64))
def test_frame_decoder_raises_only_protocol_errors(chunks: list[bytes], max_size: int) -> None:
    decoder = FrameDecoder(max_frame_size=max_size)
    try:
        for chunk in chunks:
            for piece in decoder.feed(chunk):
                assert len(piece) <= max_size
    except ProtocolError:
        pass


@FUZZ
@given(st.lists(st.binary(max_size=50), max_size=6), st.data())
def test_frames_survive_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    out: list[bytes] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        out += decoder.feed(stream[previous:cut])
        previous = cut
    assert out == payloads
    assert decoder.buffered == 0


@FUZZ
@given(st.binary(max_size=200))
def test_random_frames_raise_only_request_errors(data: bytes) -> None:
    decode_only_protocol_errors(data)


@FUZZ
@given(st.sampled_from(SERVED), st.integers(-(2**31), 2**31 - 1), interesting_bytes)
def test_valid_header_random_body_raises_only_request_errors(
    api: tuple[int, int], correlation_id: int, body: bytes
) -> None:
    api_key, version = api
    header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"c"
    if request_header_version(api_key, version) >= 2:
        header += b"\x00"
    try:
        DECODER.decode(header + body)
    except RequestError as error:
        assert error.correlation_id == correlation_id
        assert (error.api_key, error.api_version) == api


@FUZZ
@given(st.sampled_from(CORPUS), st.data())
def test_mutated_real_requests_raise_only_request_errors(
    request: bytes, data: st.DataObject
) -> None:
    decode_only_protocol_errors(mutate(request, data, edits=(1, 4)))


@FUZZ
@given(interesting_bytes)
def test_random_responses_raise_only_invalid_response(data: bytes) -> None:
    with contextlib.suppress(InvalidResponseError):
        decode_response(b"\x00\x00\x00\x01" + data, metadata_v12_response.MetadataResponse)


# ---------------------------------------------------------------------------- Produce, decoded by hand


def _produce_frame(version: int, transactional_id: str | None) -> bytes:
    return encode_request(_request(version, transactional_id), correlation_id=9, client_id="p")[4:]  # type: ignore[arg-type]


PRODUCE_CORPUS = [_produce_frame(v, t) for v in range(3, 10) for t in (None, "tx")]


def _kio_produce(frame: bytes) -> tuple[object, ...] | None:
    """What kio (behind the structural guard) reads from the frame, or None if it refuses it."""
    version = struct.unpack_from(">h", frame, 2)[0]
    try:
        _header, position = parse_request_header(frame, 2 if version >= 9 else 1)
        return produce_fields(_kio_body_reader(load_request_schema(0, version))(frame, position))
    except Exception:
        return None


@FUZZ
@given(st.sampled_from(PRODUCE_CORPUS), st.data())
def test_produce_decoded_by_hand_agrees_with_kio(request: bytes, data: st.DataObject) -> None:
    """The hand decoder accepts what kio + guard accept, with the same fields, and refuses the
    rest with a RequestError. The one deliberate difference: a null topic or partition array,
    which Kafka's schema does not allow (kio hands the handler None)."""
    frame = mutate(request, data, edits=(0, 3), keep=8)  # keep api key and version
    expected = _kio_produce(frame)
    try:
        got = produce_fields(DECODER.decode(frame).body)
    except RequestError as error:
        assert error.correlation_id == struct.unpack_from(">i", frame, 4)[0]
        if expected is not None:  # refused where kio read it: only for a null array
            topics = expected[3]
            assert topics is None or any(partitions is None for _name, partitions in topics), expected
        return
    assert got == expected


def test_produce_corpus_decodes_by_hand_as_kio_does() -> None:
    for request in PRODUCE_CORPUS:
        body = DECODER.decode(request).body
        assert type(body).__name__ == "ProduceRequestData"
        assert _kio_produce(request) is not None
        assert produce_fields(body) == _kio_produce(request)
