"""The C Produce codec (pulllog.net._cproduce) against the pure-Python one: the broker's
request decoder gives the same Request (same values, same named-tuple types) or leaves the
frame to the Python decoder, and the answer encoder writes the same bytes or hands the call
to the Python encoder, which raises the same errors.

As for the records extension, the C code is optional for a user but not for a test run:
where it was not built, ``test_the_c_produce_codec_is_built`` fails. With
PULLLOG_NO_EXTENSIONS=1 the broker uses the Python code alone (the comparisons still call the
C functions directly where they are built).
"""

from __future__ import annotations

import random
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.net import produce, protocol
from pulllog.net.errors import RequestError
from pulllog.net.produce import (
    PartitionProduceResponse,
    TopicProduceResponse,
    encode_produce_frame,
    encode_produce_response,
    py_encode_produce_response,
)
from pulllog.net.protocol import RequestDecoder
from pulllog.records.batch import build_batch
from pulllog.records.extensions import extensions_disabled
from pulllog.records.varint import encode_uvarint

NO_EXTENSIONS = extensions_disabled()

try:
    from pulllog.net import _cproduce
except ImportError:
    _cproduce = None  # type: ignore[assignment]
else:
    if NO_EXTENSIONS:  # built but unused: bound here for the comparisons
        _cproduce.bind_decoder(protocol.Request, produce.ProduceRequestData, produce.TopicProduceData,
                               produce.PartitionProduceData)
        _cproduce.bind_encoder(TopicProduceResponse, PartitionProduceResponse, py_encode_produce_response)

needs_c = pytest.mark.skipif(_cproduce is None, reason="the C codec is not built (test_the_c_produce_codec_is_built says so)")

VERSIONS = range(3, 10)
RECORDS = build_batch([(None, b"v" * 200)] * 3)
DECODER = RequestDecoder({0: (3, 9)})


def test_the_c_produce_codec_is_built() -> None:
    if NO_EXTENSIONS:
        assert produce.IMPLEMENTATION == "python"
        assert protocol._c_decode_produce is None
        assert encode_produce_response is py_encode_produce_response
    else:
        assert _cproduce is not None, "run `python setup.py build_ext --inplace` (or PULLLOG_NO_EXTENSIONS=1)"
        assert produce.IMPLEMENTATION == "c"
        assert protocol._c_decode_produce is _cproduce.decode_request
        assert encode_produce_response is _cproduce.encode_response


def python_decode(frame: bytes) -> Any:
    """What the broker's decoder gives without the C code: the Request, or the error it raises."""
    saved, protocol._c_decode_produce = protocol._c_decode_produce, None
    try:
        return DECODER.decode(frame)
    except RequestError as error:
        return error
    finally:
        protocol._c_decode_produce = saved


def assert_same_request(c: Any, py: Any) -> None:
    assert c == py
    assert type(c) is type(py) and type(c.body) is type(py.body)
    assert type(c.body.topic_data) is list
    for c_topic, py_topic in zip(c.body.topic_data, py.body.topic_data, strict=True):
        assert type(c_topic) is type(py_topic) and type(c_topic.partition_data) is list
        for c_partition, py_partition in zip(c_topic.partition_data, py_topic.partition_data, strict=True):
            assert type(c_partition) is type(py_partition)
            assert type(c_partition.records) is type(py_partition.records)


def check(frame: bytes, low: int = 3, high: int = 9) -> Any:
    """The C decoder gives the Python decoder's Request, or None where Python refuses the frame."""
    py = python_decode(frame)
    c = _cproduce.decode_request(frame, low, high)
    # the broker's case: the frame read in place, a view into its connection's read buffer
    buffer = bytearray(b"\xee" * 3 + frame + b"\xee" * 5)
    in_place = _cproduce.decode_request(memoryview(buffer)[3:3 + len(frame)], low, high)
    if c is None:
        assert in_place is None
    else:
        assert_same_request(in_place, c)
    if isinstance(py, RequestError):
        assert c is None, f"C decoded a frame the Python decoder refuses ({py}): {c}"
    elif c is not None:
        assert_same_request(c, py)
    return c


SHAPES = [
    [("bench", [(0, RECORDS)])],
    [("a", [(0, RECORDS), (1, None), (2, b"")]), ("b\u00e9", [])],
    [],
    [("t" * 300, [(7, RECORDS * 60)])],  # a long name, and records with a 3-byte compact length
]


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "pulllog-producer", "cl\u00efent"])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_a_request_decodes_to_the_python_decoders_request(
        version: int, client_id: str | None, transactional_id: str | None, shape: int) -> None:
    frame = encode_produce_frame(version, 123456, client_id, transactional_id, -1, 30_000, SHAPES[shape])[4:]
    assert check(frame) is not None  # the C decoder takes every request of the usual shape


@needs_c
def test_the_same_names_twice_decode_to_equal_requests() -> None:
    # (the decoder reuses the previous request's str for a name it sees again)
    frame = encode_produce_frame(9, 1, "client", None, 1, 30_000, SHAPES[0])[4:]
    other = encode_produce_frame(9, 2, "client2", None, 1, 30_000, [("bench2", [(0, RECORDS)])])[4:]
    for f in (frame, frame, other, frame):
        assert check(f) is not None


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
def test_versions_not_served_and_other_apis_are_left_to_python(version: int) -> None:
    frame = encode_produce_frame(version, 1, "c", None, 1, 30_000, SHAPES[0])[4:]
    assert _cproduce.decode_request(frame, version + 1, 9) is None
    assert _cproduce.decode_request(frame, 3, version - 1) is None
    assert _cproduce.decode_request(b"\x00\x03" + frame[2:], 0, 12) is None  # Metadata's key
    assert _cproduce.decode_request(bytearray(frame), 3, 9) is None  # bytes or a memoryview only


@needs_c
def test_a_view_of_a_read_buffer_decodes_in_place_and_anything_else_is_left_to_python() -> None:
    frame = encode_produce_frame(9, 1, "c", None, 1, 30_000, SHAPES[0])[4:]
    buffer = bytearray(frame)
    view = memoryview(buffer)
    request = DECODER.decode(view)
    assert request == DECODER.decode(frame) == python_decode(frame)
    buffer[:] = b"\x00" * len(buffer)  # the next read overwrites the buffer: the request kept nothing of it
    assert request == python_decode(frame)
    assert _cproduce.decode_request(memoryview(bytes(frame * 2))[::2], 3, 9) is None  # not contiguous
    released = memoryview(bytearray(frame))
    released.release()
    assert _cproduce.decode_request(released, 3, 9) is None
    with pytest.raises(ValueError):  # as Python's decoder says (bytes() of a released view)
        DECODER.decode(released)


@needs_c
def test_non_empty_tag_buffers_are_left_to_python() -> None:
    frame = encode_produce_frame(9, 1, "c", None, 1, 30_000, SHAPES[0])[4:]
    header_end = 10 + 1  # api key, version, correlation id, client id "c"
    assert frame[header_end] == 0
    tagged = frame[:header_end] + b"\x01\x05\x02ab" + frame[header_end + 1:]  # one tagged field, 2 bytes
    assert _cproduce.decode_request(tagged, 3, 9) is None
    request = python_decode(tagged)
    assert not isinstance(request, RequestError)
    assert request == python_decode(frame)


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncated_request_is_left_to_python(version: int) -> None:
    frame = encode_produce_frame(version, 1, "c", "tx", 1, 30_000, SHAPES[1])[4:]
    for end in range(len(frame)):
        assert check(frame[:end]) is None
    assert check(frame + b"\x00") is None  # a byte left over


@needs_c
@settings(max_examples=400, deadline=None)
@given(version=st.sampled_from(VERSIONS), shape=st.sampled_from(range(len(SHAPES) - 1)),
       seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 4))
def test_mutated_requests_decode_as_python_decodes_them(version: int, shape: int, seed: int, flips: int) -> None:
    frame = bytearray(encode_produce_frame(version, 1, "client", None, 1, 30_000, SHAPES[shape])[4:])
    rng = random.Random(seed)
    for _ in range(flips):
        frame[rng.randrange(len(frame))] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    check(bytes(frame), 0, 12)


def _topics_frame(version: int, count: int, topics: bytes) -> bytes:
    """A Produce frame without client id and transactional id declaring ``count`` topics,
    whose topic data (and, in v9, the body's tags) are ``topics``."""
    flexible = version >= 9
    head = struct.pack(">hhih", 0, version, 5, -1) + (b"\x00\x00" if flexible else b"\xff\xff")
    head += struct.pack(">hi", 1, 30_000)
    return head + (encode_uvarint(count + 1) if flexible else struct.pack(">i", count)) + topics


@needs_c
@pytest.mark.parametrize("version", [3, 9])
@pytest.mark.parametrize("array", ["topics", "partitions"])
def test_a_count_the_bytes_cannot_hold_allocates_nothing(version: int, array: str) -> None:
    # 60,000 topics (or partitions) in 60,000 bytes: less than the smallest topic (6 bytes, 3
    # in v9) or partition (8, 6) each, so the frame is broken; it goes to the Python decoder
    # before the C decoder makes a list of 60,000 slots (8 bytes for each byte of the frame).
    if array == "topics":
        frame = _topics_frame(version, 60_000, b"\x00" * 60_000)
    else:
        flexible = version >= 9
        topic = (b"\x02t" + encode_uvarint(60_001)) if flexible else (b"\x00\x01t" + struct.pack(">i", 60_000))
        frame = _topics_frame(version, 1, topic + b"\x00" * 60_000)
    assert isinstance(python_decode(frame), RequestError)
    tracemalloc.start()
    try:
        assert _cproduce.decode_request(frame, 3, 9) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10_000, f"{peak} bytes allocated for a frame the Python decoder refuses"


@needs_c
@pytest.mark.parametrize("version", [3, 8, 9])
def test_as_many_elements_as_the_bytes_can_hold_decode_in_c(version: int) -> None:
    flexible = version >= 9
    tags = b"\x00" if flexible else b""
    # the smallest topic: an empty name, no partitions, no tags
    smallest_topic = (b"\x01\x01" if flexible else b"\x00\x00\x00\x00\x00\x00") + tags
    request = check(_topics_frame(version, 500, smallest_topic * 500 + tags))
    assert request is not None and len(request.body.topic_data) == 500
    # the smallest partition: null records, no tags
    smallest_partition = struct.pack(">i", 3) + (b"\x00" if flexible else b"\xff\xff\xff\xff") + tags
    topic = (b"\x02t" + encode_uvarint(501)) if flexible else (b"\x00\x01t" + struct.pack(">i", 500))
    request = check(_topics_frame(version, 1, topic + smallest_partition * 500 + tags + tags))
    assert request is not None and len(request.body.topic_data[0].partition_data) == 500


@needs_c
def test_bad_utf8_in_a_name_is_left_to_python() -> None:
    frame = encode_produce_frame(9, 1, "client", None, 1, 30_000, [("ab", [(0, RECORDS)])])[4:]
    at = frame.index(b"ab")
    bad = frame[:at] + b"\xff\xfe" + frame[at + 2:]
    assert check(bad) is None
    assert isinstance(python_decode(bad), RequestError)


# ---------------------------------------------------------------------------- answers

ANSWERS = [
    [TopicProduceResponse("t", [PartitionProduceResponse(0, 0, 99, -1, 0)])],
    [TopicProduceResponse("t\u00e9", [PartitionProduceResponse(3, 6, -1, 12, 4),
                                      PartitionProduceResponse(1, 0, 2**62, 1_700_000_000_000, 2**40)]),
     TopicProduceResponse("u", [])],
    [],
    # record errors and messages: the Python encoder's share
    [TopicProduceResponse("t", [PartitionProduceResponse(0, 87, -1, -1, -1, [(0, "bad"), (2, None)], "why"),
                                PartitionProduceResponse(1, 0, 5)])],
    [TopicProduceResponse("t", [PartitionProduceResponse(0, 2, -1, -1, -1, (), "message only")])],
    [TopicProduceResponse("t", (PartitionProduceResponse(0, 0, 1),))],  # a tuple of partitions
    (TopicProduceResponse("t" * 200, [PartitionProduceResponse(-(2**31), -(2**15), -(2**63), 2**63 - 1, 0)]),),
]


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("answer", range(len(ANSWERS)))
@pytest.mark.parametrize("throttle", [None, 0, 1234])
def test_an_answer_encodes_to_the_python_encoders_bytes(version: int, answer: int, throttle: int | None) -> None:
    args: tuple[Any, ...] = (-7, version, ANSWERS[answer]) + (() if throttle is None else (throttle,))
    assert _cproduce.encode_response(*args) == py_encode_produce_response(*args)


@needs_c
@pytest.mark.parametrize("bad", [
    (1, 10, []),  # a version outside 3-9: ValueError
    (1, 2, []),
    (2**31, 9, []),  # a correlation id out of int32: struct.error
    (1, 9, [TopicProduceResponse("t", [PartitionProduceResponse(2**31, 0, 0)])]),
    (1, 9, [TopicProduceResponse("t", [PartitionProduceResponse(0, 2**15, 0)])]),
    (1, 9, [TopicProduceResponse("t", [PartitionProduceResponse(0, 0, 2**63)])]),
    (1, 9, [TopicProduceResponse("t", [PartitionProduceResponse(0, 0, 0, 0, "x")])]),
    (1, 9, [TopicProduceResponse("\ud800", [])]),  # no UTF-8: UnicodeEncodeError
    (1, 9, [], 2**31),
])
def test_an_answer_python_refuses_is_refused_the_same_way(bad: tuple[Any, ...]) -> None:
    with pytest.raises(Exception) as python_error:
        py_encode_produce_response(*bad)
    with pytest.raises(type(python_error.value)) as c_error:
        _cproduce.encode_response(*bad)
    assert str(c_error.value) == str(python_error.value)


@needs_c
def test_values_of_int_subclasses_encode_as_python_encodes_them() -> None:
    answer = [TopicProduceResponse("t", [PartitionProduceResponse(True, False, 5)])]
    assert _cproduce.encode_response(1, 9, answer) == py_encode_produce_response(1, 9, answer)


@needs_c
def test_a_large_answer_grows_the_buffer() -> None:
    answer = [TopicProduceResponse(f"topic-{t}", [PartitionProduceResponse(p, 0, p * 10) for p in range(50)])
              for t in range(40)]
    frame = _cproduce.encode_response(3, 9, answer)
    assert frame == py_encode_produce_response(3, 9, answer)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4


# ------------------------------------------------------------- the producer's one-partition path


def c_one(encoder: produce.ProduceRequestEncoder) -> Any:
    """The C twin of ``encoder``'s one_partition_frame and one_partition_ack, on its caches
    (the encoder's own ``frame_one``/``ack_one`` where the extensions are used)."""
    return _cproduce.OnePartition(encoder.version, encoder._one_partition, encoder._acks, encoder._answer_tail,
                                  encoder.one_partition_frame, encoder.one_partition_ack)


def test_the_producer_uses_the_c_one_partition_path_when_built() -> None:
    encoder = produce.ProduceRequestEncoder(9, "c", None, 1, 1000)
    if NO_EXTENSIONS or _cproduce is None:
        assert encoder.frame_one == encoder.one_partition_frame and encoder.ack_one == encoder.one_partition_ack
    else:
        assert type(encoder.frame_one.__self__) is _cproduce.OnePartition
        assert type(encoder.ack_one.__self__) is _cproduce.OnePartition


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("size", [0, 90, 126, 127, 300, 16382, 16383, 20_000, 2_097_150, 2_097_151])
def test_a_one_partition_frame_is_the_python_encoders(version: int, transactional_id: str | None, size: int) -> None:
    """Every compact length's width (1-4 bytes at v9), from the topic's cached prefix."""
    encoder = produce.ProduceRequestEncoder(version, "pulllog-producer", transactional_id, 1, 30_000)
    one = c_one(encoder)
    records = bytes(random.Random(size).randbytes(size))
    assert one.frame(2**31 - 1, "t" * 130, 11, records) == encoder.one_partition_frame(2**31 - 1, "t" * 130, 11, records)
    assert "t" * 130 in encoder._one_partition  # the first frame (Python's) filled the cache: now C's
    for correlation_id, partition in [(0, 0), (7, 2**31 - 1), (-2**31, -1), (2**31 - 1, 11)]:
        assert (one.frame(correlation_id, "t" * 130, partition, records)
                == encoder.one_partition_frame(correlation_id, "t" * 130, partition, records)
                == encode_produce_frame(version, correlation_id, "pulllog-producer", transactional_id, 1, 30_000,
                                        [("t" * 130, [(partition, records)])]))


@needs_c
@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(VERSIONS), topic=st.text(min_size=1, max_size=40),
       correlation_id=st.integers(-2**31, 2**31 - 1), partition=st.integers(-2**31, 2**31 - 1),
       records=st.binary(max_size=600))
def test_any_one_partition_frame_is_the_python_encoders(version: int, topic: str, correlation_id: int,
                                                         partition: int, records: bytes) -> None:
    encoder = produce.ProduceRequestEncoder(version, None, None, -1, 5000)
    one = c_one(encoder)
    for _ in range(2):  # the first call fills the topic's prefix (the Python method), the second is C's
        assert one.frame(correlation_id, topic, partition, records) == encoder.one_partition_frame(
            correlation_id, topic, partition, records)


@needs_c
@pytest.mark.parametrize("args", [
    (2**31, "t", 0, b"r"), (1, "t", 2**31, b"r"), (1, "t", -2**31 - 1, b"r"),  # out of int32: struct.error
    (1, "t", 0, None), (1.5, "t", 0, b"r"), (1, "t", "0", b"r"),
])
def test_a_one_partition_frame_python_refuses_is_refused_the_same_way(args: tuple[Any, ...]) -> None:
    encoder = produce.ProduceRequestEncoder(9, "c", None, 1, 1000)
    one = c_one(encoder)
    one.frame(1, "t", 0, b"warm")  # the topic's prefix cached: the C path is the one refusing
    with pytest.raises(Exception) as python_error:
        encoder.one_partition_frame(*args)
    with pytest.raises(type(python_error.value)) as c_error:
        one.frame(*args)
    assert str(c_error.value) == str(python_error.value)


def _acks_to_check(version: int) -> list[bytes]:
    one = [PartitionProduceResponse(0, 0, 5)]
    answers = [
        encode_produce_response(7, version, [TopicProduceResponse("topic", [p])], 250)[4:]
        for p in [PartitionProduceResponse(0, 0, 9), PartitionProduceResponse(0, 0, 2**40, 1_700_000_000_123, 5),
                  PartitionProduceResponse(0, 0, -1, -1), PartitionProduceResponse(0, 0, 2**63 - 1, -2**63),
                  PartitionProduceResponse(0, 6), PartitionProduceResponse(0, -1), PartitionProduceResponse(1, 0, 9),
                  PartitionProduceResponse(-1, 0, 9)]
    ]
    answers += [
        encode_produce_response(7, version, [TopicProduceResponse("other", one)])[4:],
        encode_produce_response(7, version, [TopicProduceResponse("topic", one * 2)])[4:],
        encode_produce_response(7, version, [TopicProduceResponse("topic", one), TopicProduceResponse("more", one)])[4:],
        encode_produce_response(7, version, [TopicProduceResponse("topic", one)])[4:-1],
        encode_produce_response(7, version, [TopicProduceResponse("topic", one)])[4:] + b"\x00",
        b"",
    ]
    if version >= 8:
        answers.append(encode_produce_response(7, version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 0, 5, error_message="no")])])[4:])
        answers.append(encode_produce_response(7, version, [TopicProduceResponse("topic", [
            PartitionProduceResponse(0, 0, 5, record_errors=[(0, None)])])])[4:])
    return answers


@needs_c
@pytest.mark.parametrize("version", VERSIONS)
def test_an_acknowledgement_reads_as_the_python_one(version: int) -> None:
    encoder = produce.ProduceRequestEncoder(version, "c", None, 1, 1000)
    one = c_one(encoder)
    answers = _acks_to_check(version)
    assert one.ack(answers[0], "topic", 0) == encoder.one_partition_ack(answers[0], "topic", 0) == (9, -1)
    assert "topic" in encoder._acks  # the first call (Python's) filled the shape: now C's
    for frame in answers:
        for partition in (0, 1, -1, 2**31, True):
            assert one.ack(frame, "topic", partition) == encoder.one_partition_ack(frame, "topic", partition)


@needs_c
@settings(max_examples=400, deadline=None)
@given(version=st.sampled_from(VERSIONS), which=st.integers(0, 100), seed=st.integers(0, 2**32),
       flips=st.integers(0, 3))
def test_a_mutated_acknowledgement_reads_as_the_python_one(version: int, which: int, seed: int, flips: int) -> None:
    encoder = produce.ProduceRequestEncoder(version, "c", None, 1, 1000)
    one = c_one(encoder)
    answers = _acks_to_check(version)
    one.ack(answers[0], "topic", 0)
    frame = bytearray(answers[which % len(answers)])
    rng = random.Random(seed)
    for _ in range(flips if frame else 0):
        frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    assert one.ack(bytes(frame), "topic", 0) == encoder.one_partition_ack(bytes(frame), "topic", 0)
