"""Fetch responses whose record bytes never pass through Python.

A Fetch response is small structure around large opaque ``records`` fields, and those
records are byte ranges of segment files, exactly as stored. So the encoder does not
read them: it emits a list of *chunks*, ``bytes`` for the structure and
:class:`FileSlice` placeholders for the records, and the server writes the bytes and
``sendfile``\\s the slices. Every length on the wire (the frame size, each records
length) is computed from ``FileSlice.length``, so the chunks are final before a byte of
a segment is touched.

Layout, versions 4-18 (big-endian; ``[vN+]`` marks fields added in version N)::

    size                  int32    everything after this field
    correlation_id        int32    response header v0; v12+ (flexible) uses header v1:
    [v12+] header tags    uvarint  0
    throttle_time_ms      int32
    [v7+]  error_code     int16
    [v7+]  session_id     int32
    topics                array
      topic               string   v4-v12: name; [v13+] topic_id: uuid (16 bytes)
      partitions          array
        partition_index        int32
        error_code             int16
        high_watermark         int64
        last_stable_offset     int64
        [v5+] log_start_offset int64
        aborted_transactions   nullable array of (producer_id int64, first_offset int64)
        [v11+] preferred_read_replica int32
        records                nullable bytes   <- a FileSlice goes here
        [v12+] tags            uvarint 0
      [v12+] tags         uvarint  0
    [v12+] tags           uvarint  0

Non-flexible versions (4-11) use int16-length strings, int32-length arrays (-1 = null)
and int32-length bytes; flexible versions (12+) use uvarint length+1 for all three
(0 = null) and end every struct with a tag buffer. We never write tagged fields
(diverging epoch, current leader, snapshot id, node endpoints): a single broker has
nothing to say in them, and an empty tag buffer is always valid. Versions 13-18 share
one response layout (v16 only adds a tagged field).

A slice that turns out shorter when it is finally read (segment truncated or deleted
in between) cannot be patched: the size prefix is already on the wire. The server must
close the connection then, as Kafka does ("Size of FileRecords has been truncated").

The request (client side), versions 4-12, also encoded by hand: a consumer sends one per
few hundred KB it reads, and kio (build the dataclasses, then its generic writer) took
~50 us for it, a tenth of the consumer's CPU at 200-byte records; this takes a few. The
tests check it byte for byte against kio for every version. After the request header (v1;
v2 with an empty tag buffer for v12)::

    replica_id            int32    -1: a consumer
    max_wait_ms           int32
    min_bytes             int32
    max_bytes             int32
    isolation_level       int8
    [v7+]  session_id     int32    0: no fetch session
    [v7+]  session_epoch  int32    -1
    topics                array
      topic               string
      partitions          array
        partition                  int32
        [v9+]  current_leader_epoch int32   -1: not known
        fetch_offset               int64
        [v12+] last_fetched_epoch  int32    -1
        [v5+]  log_start_offset    int64    -1: a consumer
        partition_max_bytes        int32
        [v12+] tags                uvarint  0
      [v12+] tags         uvarint  0
    [v7+]  forgotten_topics_data   array    empty
    [v11+] rack_id        string   ""
    [v12+] tags           uvarint  0
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..records.varint import VarintError, read_uvarint, write_uvarint
from .guard import MalformedError, skip_tag_buffer

__all__ = [
    "FETCH_MAX_VERSION",
    "FETCH_MIN_VERSION",
    "AbortedTransaction",
    "Chunk",
    "FetchPartitionResponse",
    "FetchResponseData",
    "FetchTopicResponse",
    "FileSlice",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
    "materialize",
    "wire_size",
]

FETCH_MIN_VERSION: Final = 4
FETCH_MAX_VERSION: Final = 18

_INT32_MAX: Final = 2**31 - 1
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_INT64: Final = struct.Struct(">q")
_TOP_V7: Final = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_HEAD: Final = struct.Struct(">ihqq")  # index, error, high watermark, LSO
_ABORTED: Final = struct.Struct(">qq")

FETCH_REQUEST_MIN_VERSION: Final = 4
FETCH_REQUEST_MAX_VERSION: Final = 12
_REQUEST_HEAD: Final = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_REQUEST_TOP: Final = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation level
_SESSION: Final = struct.Struct(">ii")  # session id, session epoch
_FETCH_API_KEY: Final = 1


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``length`` bytes of ``file`` from ``position``.

    ``file`` is a path, a descriptor, or an open file object; the broker passes the
    segment's open file object, so the data stays readable until the response is sent
    even if retention unlinks the segment meanwhile. A description only: nothing here
    opens or reads the file.
    """

    file: str | os.PathLike[str] | int | Any
    position: int
    length: int

    def __post_init__(self) -> None:
        if self.position < 0:
            raise ValueError(f"FileSlice position must be >= 0, got {self.position}")
        if not 0 <= self.length <= _INT32_MAX:
            raise ValueError(f"FileSlice length must be in [0, 2**31), got {self.length}")


Chunk = bytes | FileSlice
"""One piece of an encoded response: bytes to write, or a file range to sendfile."""


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[AbortedTransaction] | None = None
    """None for read_uncommitted fetches; a (possibly empty) list for read_committed, and an
    empty list for a partition answered with an error before any read (as Kafka)."""
    preferred_read_replica: int = -1
    records: bytes | memoryview | FileSlice | None = None
    """A FileSlice (or bytes) to encode; a view of the answer's buffer when decoded."""


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    name: str = ""
    """The topic name: sent up to v12."""
    topic_id: uuid.UUID | None = None
    """The topic id: sent from v13 on, where it replaces the name."""
    partitions: Sequence[FetchPartitionResponse] = ()


@dataclass(frozen=True, slots=True)
class FetchResponseData:
    throttle_time_ms: int = 0
    error_code: int = 0
    """Top-level error (v7+), e.g. FETCH_SESSION_ID_NOT_FOUND."""
    session_id: int = 0
    """The fetch session id (v7+), 0 outside a fetch session."""
    topics: Sequence[FetchTopicResponse] = field(default_factory=tuple)


def _write_length(out: bytearray, length: int, flexible: bool) -> None:
    """Array count or bytes length; ``-1`` writes null."""
    if flexible:
        write_uvarint(out, length + 1)
    else:
        out += _INT32.pack(length)


def _write_string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    if flexible:
        write_uvarint(out, len(data) + 1)
    else:
        out += _INT16.pack(len(data))
    out += data


def _request_partition(version: int) -> struct.Struct:
    return struct.Struct(">i" + ("i" if version >= 9 else "") + "q" + ("i" if version >= 12 else "")
                         + ("q" if version >= 5 else "") + "i")


# Per version: one partition of the request (see the layout above).
_REQUEST_PARTITION: Final = {v: _request_partition(v)
                             for v in range(FETCH_REQUEST_MIN_VERSION, FETCH_REQUEST_MAX_VERSION + 1)}


def encode_fetch_request(
    version: int, correlation_id: int, client_id: str | None, *, max_wait_ms: int, min_bytes: int, max_bytes: int,
    isolation_level: int, topics: Sequence[tuple[str, Sequence[tuple[int, int]]]], partition_max_bytes: int,
) -> bytes:
    """A consumer's whole Fetch request frame, size prefix included.

    ``topics`` is ``[(topic, [(partition, fetch_offset), ...]), ...]``; every partition asks
    for up to ``partition_max_bytes``. No fetch session, leader epoch or rack.
    """
    if not FETCH_REQUEST_MIN_VERSION <= version <= FETCH_REQUEST_MAX_VERSION:
        raise ValueError(f"Fetch request v{version} is not encodable "
                         f"(v{FETCH_REQUEST_MIN_VERSION}-v{FETCH_REQUEST_MAX_VERSION})")
    flexible = version >= 12
    out = bytearray(_REQUEST_HEAD.size)  # filled in once the size is known
    if client_id is None:
        out += _INT16.pack(-1)
    else:
        _write_string(out, client_id, False)  # the request header's client id is never compact
    if flexible:
        out.append(0)  # header tags
    out += _REQUEST_TOP.pack(-1, max_wait_ms, min_bytes, max_bytes, isolation_level)
    if version >= 7:
        out += _SESSION.pack(0, -1)
    _write_length(out, len(topics), flexible)
    pack = _REQUEST_PARTITION[version].pack
    for topic, partitions in topics:
        _write_string(out, topic, flexible)
        _write_length(out, len(partitions), flexible)
        for index, fetch_offset in partitions:
            if version >= 12:  # current leader epoch, last fetched epoch, log start offset: not known
                out += pack(index, -1, fetch_offset, -1, -1, partition_max_bytes)
                out.append(0)  # tags
            elif version >= 9:
                out += pack(index, -1, fetch_offset, -1, partition_max_bytes)
            elif version >= 5:
                out += pack(index, fetch_offset, -1, partition_max_bytes)
            else:
                out += pack(index, fetch_offset, partition_max_bytes)
        if flexible:
            out.append(0)
    if version >= 7:
        _write_length(out, 0, flexible)  # forgotten topics: none
    if version >= 11:
        _write_string(out, "", flexible)  # rack id
    if flexible:
        out.append(0)
    _REQUEST_HEAD.pack_into(out, 0, len(out) - 4, _FETCH_API_KEY, version, correlation_id)
    return bytes(out)


def encode_fetch_response(
    correlation_id: int, version: int, response: FetchResponseData
) -> list[Chunk]:
    """The whole response frame (size prefix included) as chunks, in wire order.

    Consecutive bytes are merged, so the result alternates ``bytes`` and
    :class:`FileSlice`; records given as ``bytes`` are copied inline.
    """
    if not FETCH_MIN_VERSION <= version <= FETCH_MAX_VERSION:
        raise ValueError(
            f"Fetch v{version} is not encodable (v{FETCH_MIN_VERSION}-v{FETCH_MAX_VERSION})"
        )
    flexible = version >= 12
    pieces: list[bytearray | FileSlice] = []
    head = out = bytearray(8)  # size (patched at the end), correlation id
    _INT32.pack_into(out, 4, correlation_id)
    if flexible:
        out.append(0)  # response header v1: empty tag buffer
    if version >= 7:
        out += _TOP_V7.pack(response.throttle_time_ms, response.error_code, response.session_id)
    else:
        out += _INT32.pack(response.throttle_time_ms)
    _write_length(out, len(response.topics), flexible)
    for topic in response.topics:
        if version >= 13:
            if topic.topic_id is None:
                raise ValueError(f"Fetch v{version} needs a topic_id for topic {topic.name!r}")
            out += topic.topic_id.bytes
        else:
            name = topic.name.encode()
            if flexible:
                write_uvarint(out, len(name) + 1)
            else:
                out += _INT16.pack(len(name))
            out += name
        _write_length(out, len(topic.partitions), flexible)
        for partition in topic.partitions:
            out += _PARTITION_HEAD.pack(
                partition.partition_index,
                partition.error_code,
                partition.high_watermark,
                partition.last_stable_offset,
            )
            if version >= 5:
                out += _INT64.pack(partition.log_start_offset)
            aborted = partition.aborted_transactions
            if aborted is None:
                _write_length(out, -1, flexible)
            else:
                _write_length(out, len(aborted), flexible)
                for transaction in aborted:
                    out += _ABORTED.pack(transaction.producer_id, transaction.first_offset)
                    if flexible:
                        out.append(0)
            if version >= 11:
                out += _INT32.pack(partition.preferred_read_replica)
            records = partition.records
            if records is None:
                _write_length(out, -1, flexible)
            elif isinstance(records, FileSlice):
                _write_length(out, records.length, flexible)
                if records.length:
                    pieces.append(out)
                    pieces.append(records)
                    out = bytearray()
            else:
                if len(records) > _INT32_MAX:
                    raise ValueError(f"records of {len(records)} bytes exceed 2**31-1")
                _write_length(out, len(records), flexible)
                out += records
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    if out:
        pieces.append(out)
    size = sum(len(piece) if isinstance(piece, bytearray) else piece.length for piece in pieces)
    if size - 4 > _INT32_MAX:
        raise ValueError(f"Fetch response of {size - 4} bytes exceeds 2**31-1")
    _INT32.pack_into(head, 0, size - 4)
    return [bytes(piece) if isinstance(piece, bytearray) else piece for piece in pieces]


def wire_size(chunks: Iterable[Chunk]) -> int:
    """Bytes the chunks put on the wire, size prefix included."""
    return sum(chunk.length if isinstance(chunk, FileSlice) else len(chunk) for chunk in chunks)


def materialize(chunks: Iterable[Chunk], read: Callable[[FileSlice], bytes]) -> bytes:
    """Join the chunks into the frame, reading each slice with ``read``.

    For clients without sendfile (TLS) and for tests. Raises ``ValueError`` if ``read``
    returns a different length than the slice promised: the frame would be corrupt.
    """
    parts: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, FileSlice):
            data = read(chunk)
            if len(data) != chunk.length:
                raise ValueError(
                    f"{chunk} yielded {len(data)} bytes instead of {chunk.length}: the "
                    "segment changed after the response was encoded; close the connection"
                )
            parts.append(data)
        else:
            parts.append(chunk)
    return b"".join(parts)


# ---------------------------------------------------------------------------- decoding (v12)

FETCH_DECODE_VERSION: Final = 12
_PARTITION_FIXED: Final = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start


def _short(what: str, position: int, need: int, end: int) -> MalformedError:
    return MalformedError(f"{what} at byte {position} needs {need} bytes but only {end - position} remain")


def _compact_size(frame: bytes | bytearray, position: int, end: int, what: str) -> tuple[int, int]:
    """A compact length or count (uvarint N + 1; 0 is null, read as -1) that the bytes left can hold."""
    try:
        value, position = read_uvarint(frame, position, end)
    except VarintError as error:
        raise MalformedError(str(error)) from None
    if value - 1 > end - position:
        raise _short(what, position, value - 1, end)
    return value - 1, position


def decode_fetch_response(frame: bytes | bytearray, version: int = FETCH_DECODE_VERSION) -> tuple[int, FetchResponseData]:
    """A Fetch v12 response frame (size prefix off) -> (correlation id, body), for the replica
    fetcher. Each partition's records are a ``memoryview`` of ``frame``, not a copy: a
    follower's answers carry up to replica.fetch.max.bytes a partition, and copying them out
    (bytes() of the frame, then a slice per partition, as kio's reader does) was most of a
    follower's CPU. Every length is checked before anything is read; raises
    :class:`MalformedError` (or ``UnicodeDecodeError``) for bytes that are no such response."""
    if version != FETCH_DECODE_VERSION:
        raise ValueError(f"Fetch v{version} responses are not decoded here (v{FETCH_DECODE_VERSION} only)")
    end = len(frame)
    view = memoryview(frame)
    if end < 4:
        raise _short("correlation id", 0, 4, end)
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    position = skip_tag_buffer(frame, 4, end)  # type: ignore[arg-type]
    if end - position < _TOP_V7.size:
        raise _short("throttle time, error code, session id", position, _TOP_V7.size, end)
    throttle_time_ms, error_code, session_id = _TOP_V7.unpack_from(frame, position)
    position += _TOP_V7.size
    count, position = _compact_size(frame, position, end, "responses")
    topics: list[FetchTopicResponse] = []
    for _ in range(max(count, 0)):
        length, position = _compact_size(frame, position, end, "topic name")
        if length < 0:
            raise MalformedError(f"null topic name before byte {position}")
        name = bytes(view[position : position + length]).decode()
        position += length
        partition_count, position = _compact_size(frame, position, end, "partitions")
        partitions: list[FetchPartitionResponse] = []
        for _ in range(max(partition_count, 0)):
            if end - position < _PARTITION_FIXED.size:
                raise _short("partition", position, _PARTITION_FIXED.size, end)
            index, code, high_watermark, stable, log_start = _PARTITION_FIXED.unpack_from(frame, position)
            position += _PARTITION_FIXED.size
            aborted_count, position = _compact_size(frame, position, end, "aborted transactions")
            aborted: list[AbortedTransaction] | None = None if aborted_count < 0 else []
            for _ in range(max(aborted_count, 0)):
                if end - position < _ABORTED.size:
                    raise _short("aborted transaction", position, _ABORTED.size, end)
                aborted.append(AbortedTransaction(*_ABORTED.unpack_from(frame, position)))  # type: ignore[union-attr]
                position = skip_tag_buffer(frame, position + _ABORTED.size, end)  # type: ignore[arg-type]
            if end - position < 4:
                raise _short("preferred read replica", position, 4, end)
            (preferred,) = _INT32.unpack_from(frame, position)
            length, position = _compact_size(frame, position + 4, end, "records")
            records = None if length < 0 else view[position : position + length]
            position = skip_tag_buffer(frame, position + max(length, 0), end)  # type: ignore[arg-type]
            partitions.append(FetchPartitionResponse(index, code, high_watermark, stable, log_start, aborted,
                                                     preferred, records))
        position = skip_tag_buffer(frame, position, end)  # type: ignore[arg-type]
        topics.append(FetchTopicResponse(name=name, partitions=partitions))
    position = skip_tag_buffer(frame, position, end)  # type: ignore[arg-type]
    if position != end:
        raise MalformedError(f"{end - position} unexpected bytes after the Fetch response (ends at byte {position})")
    return correlation_id, FetchResponseData(throttle_time_ms, error_code, session_id, topics)
