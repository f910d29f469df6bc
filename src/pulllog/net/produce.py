"""Produce requests and responses, encoded by hand: per record, for a batch-1 producer.

A producer that sends one record per request makes the broker answer one Produce per
record, so the response encoder runs as often as the append itself. Going through kio
(build the version's dataclasses, then its generic writer) cost ~25 us per response, more
than the append; this encoder writes the same bytes in ~2 us. The tests check it
byte for byte against kio for every version served.

Layout, versions 3-9 (big-endian; ``[vN+]`` marks fields added in version N)::

    size                     int32    everything after this field
    correlation_id           int32    response header v0; v9 (flexible) uses header v1:
    [v9]  header tags        uvarint  0
    responses                array
      name                   string
      partition_responses    array
        index                int32
        error_code           int16
        base_offset          int64
        log_append_time_ms   int64    -1 unless the topic uses LogAppendTime
        [v5+] log_start_offset         int64
        [v8+] record_errors            array of (batch_index int32,
                                                 batch_index_error_message nullable string)
        [v8+] error_message            nullable string
        [v9]  tags           uvarint  0
      [v9] tags              uvarint  0
    throttle_time_ms         int32
    [v9] tags                uvarint  0

The request (client side), versions 3-9, after the request header (v1; v2 for v9, which
adds an empty tag buffer after client_id)::

    transactional_id         nullable string
    acks                     int16
    timeout_ms               int32
    topic_data               array
      name                   string
      partition_data         array
        index                int32
        records              nullable bytes    the sealed RecordBatch(es), as they are
        [v9]  tags           uvarint  0
      [v9] tags              uvarint  0
    [v9] tags                uvarint  0

kio's generic writer took ~17 us for a request with 10 KB of records (it copies them
through a BytesIO); this one joins the pieces once. A producer's requests differ only in
their correlation id and topic data: :class:`ProduceRequestEncoder` encodes the rest once,
and a request for one partition (every request of a one-partition producer, and a batch-1
producer's hot path) is then one ``struct.pack`` and one join; the tests check it against
the generic encoder byte for byte.

The client decodes the response by hand too (:func:`decode_produce_response`), with the same
bounds checks as the broker's request decoder: kio's guard walk, reader and entities cost
~20 us per answer, which for a one-record request was more than the rest of the request.

The broker decodes the request by hand too (:func:`decode_produce_request`): kio's native
reader is fast, but it may only see a body after :mod:`pulllog.net.guard` has walked it
(kio aborts the process on an impossible length), and walk + read + kio's entities cost
~3x this one pass, which bounds-checks every length itself. The differences from kio are
deliberate: a null ``topic_data`` or ``partition_data`` array (non-nullable in Kafka's
schema; kio let it through to crash the handler) is refused, and tagged fields are skipped
in place (v9 defines none) instead of being cut out of a copy. The tests check it against
kio + guard on real and fuzzed requests.

Versions 3-8 use int16-length strings, int32-length arrays and bytes; v9 uses uvarint
length+1 (0 = null) and ends every struct with an empty tag buffer. We never write tagged
fields (current leader, node endpoints belong to v10+).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from ..records.extensions import extensions_disabled
from ..records.varint import VarintError, encode_uvarint, read_uvarint
from .guard import MalformedError, skip_tag_buffer

__all__ = [
    "IMPLEMENTATION",
    "PRODUCE_MAX_VERSION",
    "PRODUCE_MIN_VERSION",
    "PartitionProduceData",
    "PartitionProduceResponse",
    "ProduceRequestData",
    "TopicProduceData",
    "TopicProduceResponse",
    "ProduceRequestEncoder",
    "decode_produce_request",
    "decode_produce_response",
    "encode_produce_frame",
    "encode_produce_request",
    "encode_produce_response",
    "py_encode_produce_response",
]

PRODUCE_MIN_VERSION: Final = 3
PRODUCE_MAX_VERSION: Final = 9

_HEAD: Final = struct.Struct(">ii")  # size, correlation id
_REQUEST_HEAD: Final = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_PARTITION: Final = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5: Final = struct.Struct(">ihqqq")  # ... and log start offset
_RECORD_ERROR: Final = struct.Struct(">i")
_INDEX_AND_LENGTH: Final = struct.Struct(">ii")  # a partition's index and its records' length (v3-v8)
# v9: a partition's index and its records' compact length as a 2-byte varint (128..16383,
# a small batch's: one pack instead of a pack, a varint and a concatenation)
_INDEX_AND_VARINT2: Final = struct.Struct(">iBB")
_NULL_STRING: Final = b"\xff\xff"  # int16 -1
_EMPTY_ARRAY: Final = b"\x00\x00\x00\x00"


class PartitionProduceResponse(NamedTuple):
    index: int  # type: ignore[assignment]  # kio's name; shadows tuple.index(), which nothing calls
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: Sequence[tuple[int, str | None]] = ()
    """(batch index, message) per rejected record (KIP-467); sent from v8 on."""
    error_message: str | None = None


class TopicProduceResponse(NamedTuple):
    name: str
    partitions: Sequence[PartitionProduceResponse]


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _NULL_STRING
    data = value.encode()
    return (encode_uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data


def _count(n: int, flexible: bool) -> bytes:
    return encode_uvarint(n + 1) if flexible else _INT32.pack(n)


def py_encode_produce_response(
    correlation_id: int, version: int, topics: Sequence[TopicProduceResponse], throttle_time_ms: int = 0
) -> bytes:
    """The whole response frame, size prefix included (``encode_produce_response``: in C
    when the extension is built, for answers without record errors or error messages)."""
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encodable (v{PRODUCE_MIN_VERSION}-v{PRODUCE_MAX_VERSION})")
    flexible = version >= 9
    parts: list[bytes] = [b"\x00" if flexible else b"", _count(len(topics), flexible)]
    append = parts.append
    for topic in topics:
        append(_string(topic.name, flexible))
        append(_count(len(topic.partitions), flexible))
        for p in topic.partitions:
            if version >= 5:
                append(_PARTITION_V5.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                                          p.log_start_offset))
            else:
                append(_PARTITION.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            if version >= 8:
                if not p.record_errors and p.error_message is None:  # every accepted append
                    append(b"\x01\x00\x00" if flexible else b"\x00\x00\x00\x00\xff\xff")
                    continue
                if p.record_errors:
                    append(_count(len(p.record_errors), flexible))
                    for batch_index, message in p.record_errors:
                        append(_RECORD_ERROR.pack(batch_index))
                        append(_string(message, flexible))
                        if flexible:
                            append(b"\x00")
                else:
                    append(b"\x01" if flexible else _EMPTY_ARRAY)
                append(_string(p.error_message, flexible))
            if flexible:
                append(b"\x00")
        if flexible:
            append(b"\x00")
    append(_INT32.pack(throttle_time_ms))
    if flexible:
        append(b"\x00")
    body = b"".join(parts)
    return _HEAD.pack(len(body) + 4, correlation_id) + body


def encode_produce_request(body: Any, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Size prefix + request header + body of a kio ``ProduceRequest`` of ``version``."""
    return encode_produce_frame(
        version, correlation_id, client_id, body.transactional_id, body.acks,
        round(body.timeout.total_seconds() * 1000),
        [(topic.name, [(p.index, p.records) for p in topic.partition_data]) for topic in body.topic_data])


def encode_produce_frame(version: int, correlation_id: int, client_id: str | None, transactional_id: str | None,
                         acks: int, timeout_ms: int,
                         topic_data: Sequence[tuple[str, Sequence[tuple[int, bytes | None]]]]) -> bytes:
    """A whole Produce request frame from plain values: ``topic_data`` is (topic, [(partition,
    records)]). The producer's sender calls this directly, without building kio's classes."""
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encodable (v{PRODUCE_MIN_VERSION}-v{PRODUCE_MAX_VERSION})")
    flexible = version >= 9
    parts: list[bytes] = [b"", _string(client_id, False)]  # [0]: the fixed head, once the size is known
    append = parts.append
    if flexible:
        append(b"\x00")
    append(_string(transactional_id, flexible))
    append(_ACKS_TIMEOUT.pack(acks, timeout_ms))
    append(_count(len(topic_data), flexible))
    for name, partitions in topic_data:
        append(_string(name, flexible))
        append(_count(len(partitions), flexible))
        for index, records in partitions:
            append(_INT32.pack(index))
            if records is None:
                append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                append(encode_uvarint(len(records) + 1) if flexible else _INT32.pack(len(records)))
                append(records)
            if flexible:
                append(b"\x00")
        if flexible:
            append(b"\x00")
    if flexible:
        append(b"\x00")
    parts[0] = _REQUEST_HEAD.pack(8 + sum(map(len, parts)), 0, version, correlation_id)
    return b"".join(parts)


class ProduceRequestEncoder:
    """One producer's Produce request frames (module docstring): the request header and the
    fields before the topic data are encoded once, and each topic's name once."""

    __slots__ = ("version", "client_id", "transactional_id", "acks", "timeout_ms", "_flexible", "_fixed",
                 "_one_partition", "_answers", "_partition_at", "_answer_tail", "_acks", "frame_one", "ack_one")

    def __init__(self, version: int, client_id: str | None, transactional_id: str | None, acks: int,
                 timeout_ms: int) -> None:
        if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
            raise ValueError(f"Produce v{version} is not encodable (v{PRODUCE_MIN_VERSION}-v{PRODUCE_MAX_VERSION})")
        self.version, self.client_id, self.transactional_id = version, client_id, transactional_id
        self.acks, self.timeout_ms = acks, timeout_ms
        flexible = self._flexible = version >= 9
        # after the correlation id: client id, [v9] header tags, transactional id, acks, timeout
        self._fixed = b"".join((_string(client_id, False), b"\x00" if flexible else b"",
                                _string(transactional_id, flexible), _ACKS_TIMEOUT.pack(acks, timeout_ms)))
        self._one_partition: dict[str, bytes] = {}  # topic -> _fixed + topic_data up to its partition
        self._answers: dict[str, bytes] = {}  # topic -> a one-partition answer's bytes up to its partition
        self._partition_at = _PARTITION_V5.unpack_from if version >= 5 else _PARTITION.unpack_from
        # after the partition's fixed fields of an answer without errors: [v8+] no record errors
        # and a null error message, [v9] the partition's and the topic's tag buffers
        self._answer_tail = (b"\x01\x00\x00\x00" if flexible else b"\x00\x00\x00\x00\xff\xff" if version >= 8
                             else b"")
        # topic -> (an error-free one-partition answer's size, its bytes up to the partition,
        # where its tail starts) for one_partition_ack
        self._acks: dict[str, tuple[int, bytes, int]] = {}
        # one_partition_frame and one_partition_ack as the producer calls them, once per request
        # and answer: in C (_cproduce.OnePartition, the same bytes and answers, reading the two
        # caches above and calling these methods for what it does not do) when built
        self.frame_one: Callable[[int, str, int, bytes], bytes]
        self.ack_one: Callable[[bytes, str, int], tuple[int, int] | None]
        if _C is None:
            self.frame_one, self.ack_one = self.one_partition_frame, self.one_partition_ack
        else:
            one = _C.OnePartition(version, self._one_partition, self._acks, self._answer_tail,
                                  self.one_partition_frame, self.one_partition_ack)
            self.frame_one, self.ack_one = one.frame, one.ack

    def frame(self, correlation_id: int, topic_data: Sequence[tuple[str, Sequence[tuple[int, bytes | None]]]]) -> bytes:
        """The whole frame, size prefix included; ``topic_data`` as for :func:`encode_produce_frame`."""
        if len(topic_data) == 1:
            name, partitions = topic_data[0]
            if len(partitions) == 1:
                index, records = partitions[0]
                if records is not None:
                    return self.one_partition_frame(correlation_id, name, index, records)
        return encode_produce_frame(self.version, correlation_id, self.client_id, self.transactional_id,
                                    self.acks, self.timeout_ms, topic_data)

    def one_partition_frame(self, correlation_id: int, topic: str, partition: int, records: bytes) -> bytes:
        """The frame of a request with one partition's records (the common case)."""
        prefix = self._one_partition.get(topic)
        if prefix is None:
            flexible = self._flexible
            prefix = self._one_partition[topic] = b"".join(
                (self._fixed, _count(1, flexible), _string(topic, flexible), _count(1, flexible)))
        size = len(records)
        if self._flexible:
            n = size + 1
            if 0x80 <= n < 0x4000:
                middle = _INDEX_AND_VARINT2.pack(partition, (n & 0x7F) | 0x80, n >> 7)
            else:
                middle = _INT32.pack(partition) + encode_uvarint(n)
            tail = b"\x00\x00\x00"  # the tag buffers of the partition, the topic and the request
        else:
            middle = _INDEX_AND_LENGTH.pack(partition, size)
            tail = b""
        head = _REQUEST_HEAD.pack(8 + len(prefix) + len(middle) + size + len(tail), 0, self.version, correlation_id)
        return b"".join((head, prefix, middle, records, tail))

    def one_partition_ack(self, frame: bytes, topic: str, partition: int) -> tuple[int, int] | None:
        """(base offset, log append time) if ``frame`` (size prefix off) acknowledges a
        one-partition request of ``topic``'s ``partition`` without error, in the usual shape
        (as ``one_partition_answer``'s); None otherwise, and then ``one_partition_answer``
        or :func:`decode_produce_response` reads it. The producer's hot path: the answer's
        size and its bytes around the partition's fields are compared whole, then one unpack."""
        shape = self._acks.get(topic)
        if shape is None:
            answer_head = b"\x00" if self._flexible else b""
            head = answer_head + _count(1, self._flexible) + _string(topic, self._flexible) + _count(1, self._flexible)
            tail_at = 4 + len(head) + (30 if self.version >= 5 else 22)
            shape = self._acks[topic] = (tail_at + len(self._answer_tail) + 4 + (1 if self._flexible else 0),
                                         head, tail_at)
        size, head, tail_at = shape
        if (len(frame) != size or not frame.startswith(head, 4) or not frame.startswith(self._answer_tail, tail_at)
                or self._flexible and frame[-1]):
            return None
        index, error_code, base_offset, log_append_time = _PARTITION_AT(frame, 4 + len(head))
        if error_code or index != partition:
            return None
        return base_offset, log_append_time

    def one_partition_answer(self, frame: bytes, topic: str) -> PartitionProduceResponse | None:
        """The answer to a one-partition request of ``topic`` (size prefix off), if it has the
        usual shape (that topic alone, one partition, no record errors, no error message);
        None otherwise, and then :func:`decode_produce_response` reads it. The bytes around
        the partition's fixed fields are compared whole, so a match needs no bounds checks."""
        head = self._answers.get(topic)
        if head is None:
            flexible = self._flexible
            head = self._answers[topic] = b"".join(
                (b"\x00" if flexible else b"", _count(1, flexible), _string(topic, flexible), _count(1, flexible)))
        tail = self._answer_tail
        fixed = 30 if self.version >= 5 else 22  # _PARTITION_V5.size, _PARTITION.size
        # correlation id, head, fixed fields, tail, throttle time, [v9] the response's tag buffer
        if len(frame) != 4 + len(head) + fixed + len(tail) + 4 + (1 if self._flexible else 0):
            return None
        if not frame.startswith(head, 4):
            return None
        end = 4 + len(head) + fixed
        if tail and not frame.startswith(tail, end):
            return None
        if self._flexible and frame[-1] != 0:
            return None
        values = self._partition_at(frame, 4 + len(head))
        return _new(PartitionProduceResponse, (*values, -1)[:5] + ((), None))


# ---------------------------------------------------------------------------- decoding (broker)


class PartitionProduceData(NamedTuple):
    index: int  # type: ignore[assignment]  # kio's name; shadows tuple.index(), which nothing calls
    records: bytes | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: list[PartitionProduceData]


class ProduceRequestData(NamedTuple):
    """A Produce request body (v3-v9), with kio's field names; ``timeout_ms`` is kio's ``timeout``."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


_new: Final = tuple.__new__  # a named tuple without its keyword-handling __new__
_LENGTH16: Final = _INT16.unpack_from
_LENGTH32: Final = _INT32.unpack_from
_ACKS_TIMEOUT_AT: Final = _ACKS_TIMEOUT.unpack_from


def _short(what: str, position: int, need: int, end: int) -> MalformedError:
    return MalformedError(f"{what} at byte {position} needs {need} bytes but only {end - position} remain")


def _read_size(frame: bytes, position: int, end: int, flexible: bool, width: int, what: str) -> tuple[int, int]:
    """A size prefix: in flexible versions a compact uvarint (N + 1; 0 is null, read as -1),
    else a signed big-endian int of ``width`` bytes."""
    if flexible:
        # read_uvarint's one-byte case, inlined: nearly every size is one byte, and this
        # decoder runs per Produce request (tests/records/test_varint.py checks they agree)
        if position < end and frame[position] < 0x80:
            return frame[position] - 1, position + 1
        try:
            value, position = read_uvarint(frame, position, end)
        except VarintError as error:  # net's boundary: a bad varint is a malformed message
            raise MalformedError(str(error)) from None
        return value - 1, position
    if end - position < width:
        raise _short(what, position, width, end)
    (value,) = (_LENGTH16 if width == 2 else _LENGTH32)(frame, position)
    return value, position + width


def _read_count(frame: bytes, position: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    """A non-nullable array's element count, which the bytes left must be able to hold."""
    start = position
    count, position = _read_size(frame, position, end, flexible, 4, f"{what} count")
    if count < 0:
        raise MalformedError(f"{what} at byte {start} is null or negative ({count}); Kafka requires an array")
    if count > end - position:  # every element takes at least one byte
        raise MalformedError(f"{what} at byte {start} declares {count} elements but only {end - position} bytes remain")
    return count, position


def _read_length(frame: bytes, position: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """A string (``width`` 2) or bytes (4) length: -1 means null; the bytes must be there."""
    start = position
    length, position = _read_size(frame, position, end, flexible, width, "length")
    if length < -1:  # only a fixed-width length can be (a compact one is at least -1)
        raise MalformedError(f"negative length {length} at byte {start}")
    if length > end - position:
        raise _short("string/bytes", position, length, end)
    return length, position


def decode_produce_request(frame: bytes, position: int, version: int) -> ProduceRequestData:
    """The body of a Produce v3-v9 request at ``frame[position:]``, which it must fill exactly.

    Every length is checked against the bytes that remain before anything is sliced.
    Raises :class:`MalformedError` (or ``UnicodeDecodeError`` for a name that is no UTF-8).
    """
    flexible = version >= 9
    end = len(frame)
    length, position = _read_length(frame, position, end, flexible, 2)
    if length < 0:
        transactional_id = None
    else:
        transactional_id = frame[position : position + length].decode()
        position += length
    if end - position < 6:
        raise _short("acks and timeout", position, 6, end)
    acks, timeout_ms = _ACKS_TIMEOUT_AT(frame, position)
    position += 6
    topics, position = _read_count(frame, position, end, flexible, "topic_data")
    topic_data: list[TopicProduceData] = []
    for _ in range(topics):
        length, position = _read_length(frame, position, end, flexible, 2)
        if length < 0:
            raise MalformedError(f"null topic name at byte {position}")
        name = frame[position : position + length].decode()
        position += length
        partitions, position = _read_count(frame, position, end, flexible, "partition_data")
        partition_data: list[PartitionProduceData] = []
        for _ in range(partitions):
            if end - position < 4:
                raise _short("partition index", position, 4, end)
            (index,) = _LENGTH32(frame, position)
            length, position = _read_length(frame, position + 4, end, flexible, 4)
            if length < 0:
                records = None
            else:
                records = frame[position : position + length]
                position += length
            if flexible:
                position = skip_tag_buffer(frame, position, end)
            partition_data.append(_new(PartitionProduceData, (index, records)))
        if flexible:
            position = skip_tag_buffer(frame, position, end)
        topic_data.append(_new(TopicProduceData, (name, partition_data)))
    if flexible:
        position = skip_tag_buffer(frame, position, end)
    if position != end:
        raise MalformedError(
            f"{end - position} unexpected bytes after the body (ends at byte {position} of {end}): "
            "client and broker disagree about the schema"
        )
    return _new(ProduceRequestData, (transactional_id, acks, timeout_ms, topic_data))


# ---------------------------------------------------------------------------- the C accelerator


def _c_module() -> Any:
    """``pulllog.net._cproduce`` (``_cproduce.c``) if built and not switched off by
    ``PULLLOG_NO_EXTENSIONS=1``, else None: then the Python code here does everything."""
    if extensions_disabled():
        return None
    try:
        from . import _cproduce
    except ImportError:  # not built (no C compiler when installed)
        return None
    return _cproduce


_C: Final = _c_module()
IMPLEMENTATION: Final = "python" if _C is None else "c"
"""Which code encodes the broker's Produce answers and decodes its requests: "c" or "python"."""

if _C is None:
    encode_produce_response = py_encode_produce_response
else:
    # The C encoder writes answers without record errors or error messages and hands every
    # other call (and every error) to py_encode_produce_response; the tests check both agree.
    _C.bind_encoder(TopicProduceResponse, PartitionProduceResponse, py_encode_produce_response)
    encode_produce_response = _C.encode_response


# ---------------------------------------------------------------------------- decoding (client)

_PARTITION_AT: Final = _PARTITION.unpack_from
_PARTITION_V5_AT: Final = _PARTITION_V5.unpack_from


def _read_string(frame: bytes, position: int, end: int, flexible: bool) -> tuple[str | None, int]:
    length, position = _read_length(frame, position, end, flexible, 2)
    if length < 0:
        return None, position
    return frame[position : position + length].decode(), position + length


def decode_produce_response(frame: bytes, version: int) -> tuple[int, list[TopicProduceResponse], int]:
    """A Produce v3-v9 response frame, size prefix off -> (correlation id, topics, throttle
    time in ms). Every length is checked before anything is read; raises
    :class:`MalformedError` (or ``UnicodeDecodeError``) for bytes that are no such response."""
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is not decodable (v{PRODUCE_MIN_VERSION}-v{PRODUCE_MAX_VERSION})")
    flexible = version >= 9
    end = len(frame)
    if end < 4:
        raise _short("correlation id", 0, 4, end)
    (correlation_id,) = _LENGTH32(frame, 0)
    position = skip_tag_buffer(frame, 4, end) if flexible else 4
    fixed = _PARTITION_V5 if version >= 5 else _PARTITION
    fixed_size = fixed.size
    read_fixed = _PARTITION_V5_AT if version >= 5 else _PARTITION_AT
    topics, position = _read_count(frame, position, end, flexible, "responses")
    responses: list[TopicProduceResponse] = []
    for _ in range(topics):
        name, position = _read_string(frame, position, end, flexible)
        if name is None:
            raise MalformedError(f"null topic name before byte {position}")
        count, position = _read_count(frame, position, end, flexible, "partition_responses")
        partitions: list[PartitionProduceResponse] = []
        for _ in range(count):
            if end - position < fixed_size:
                raise _short("partition response", position, fixed_size, end)
            values = read_fixed(frame, position)
            position += fixed_size
            record_errors: list[tuple[int, str | None]] = []
            error_message = None
            if version >= 8:
                errors, position = _read_count(frame, position, end, flexible, "record_errors")
                for _ in range(errors):
                    if end - position < 4:
                        raise _short("batch index", position, 4, end)
                    (batch_index,) = _LENGTH32(frame, position)
                    message, position = _read_string(frame, position + 4, end, flexible)
                    if flexible:
                        position = skip_tag_buffer(frame, position, end)
                    record_errors.append((batch_index, message))
                error_message, position = _read_string(frame, position, end, flexible)
            if flexible:
                position = skip_tag_buffer(frame, position, end)
            log_start_offset = values[4] if version >= 5 else -1
            partitions.append(_new(PartitionProduceResponse, (
                values[0], values[1], values[2], values[3], log_start_offset, record_errors, error_message)))
        if flexible:
            position = skip_tag_buffer(frame, position, end)
        responses.append(_new(TopicProduceResponse, (name, partitions)))
    if end - position < 4:
        raise _short("throttle_time_ms", position, 4, end)
    (throttle_time_ms,) = _LENGTH32(frame, position)
    position += 4
    if flexible:
        position = skip_tag_buffer(frame, position, end)
    if position != end:
        raise MalformedError(f"{end - position} unexpected bytes after the Produce response (ends at byte {position} of {end})")
    return correlation_id, responses, throttle_time_ms
