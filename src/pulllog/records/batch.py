"""Kafka RecordBatch v2 (magic 2), exactly as it is on the wire and on disk.

Batch layout (big-endian; the first 61 bytes are the batch header)::

    offset  size  field
         0     8  baseOffset             assigned by the broker (patched in place)
         8     4  batchLength            bytes that follow this field
        12     4  partitionLeaderEpoch   patched by the broker, not covered by the CRC
        16     1  magic                  2
        17     4  crc                    CRC-32C of bytes 21 .. end
        21     2  attributes             bits 0-2 codec, 3 timestampType, 4 transactional,
                                         5 control, 6 hasDeleteHorizonMs
        23     4  lastOffsetDelta
        27     8  baseTimestamp (firstTimestamp)
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     .  records (compressed as one block when the codec is not none)

Each record::

    length: varint, attributes: int8, timestampDelta: varlong, offsetDelta: varint,
    keyLength: varint (-1 = null), key, valueLength: varint (-1 = null), value,
    headersCount: varint, then per header keyLength: varint, key (utf-8),
    valueLength: varint (-1 = null), value

Varints are zigzag-encoded (protobuf style). Because the CRC starts at ``attributes``,
the broker can assign ``baseOffset`` and ``partitionLeaderEpoch`` without recomputing it,
so an append never re-encodes records.

Control batches (transaction markers) carry one record: its format is in ``control.py``. Magic 0 and 1 message sets share the position of the magic
byte (offset 16); we recognise them only to reject them with a clear error, as Kafka 4 does.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .compression import Compression, CompressionError, compress, decompress
from .crc import crc32c
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from .varint import VarintError, decode_varint, encode_varint, write_varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatch",
    "TimestampType",
    "UnsupportedMagicError",
    "build_batch",
    "decode_varint",
    "encode_varint",
    "iter_batches",
    "read_header",
    "rebuild_batch",
    "set_base_offset",
    "validate_batch",
]

LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch that batchLength excludes
BATCH_HEADER_SIZE = 61
MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

# attributes bits
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# ---------------------------------------------------------------------------- header


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a batch: everything the broker needs, no records decoded.

    A named tuple, not a dataclass: the broker reads one per batch it receives, which for a
    batch-1 producer is once per request, and a tuple is built straight from ``unpack_from``
    (a frozen 13-field dataclass took ~5x as long, assigning each field through
    ``object.__setattr__``).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in the log."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        """With bit 6 set, baseTimestamp holds the compaction delete horizon (KIP-534)."""
        return self.base_timestamp if self.has_delete_horizon else NO_TIMESTAMP


_new_header = tuple.__new__


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. Checks the magic byte, nothing else."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        if len(buf) - pos >= 17 and buf[pos + 16] in (0, 1):
            raise UnsupportedMagicError(_magic_message(buf[pos + 16]))
        raise InvalidRecordError(
            f"batch header needs {BATCH_HEADER_SIZE} bytes, {len(buf) - pos} remain"
        )
    header = _new_header(BatchHeader, _HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        if header.magic in (0, 1):
            raise UnsupportedMagicError(_magic_message(header.magic))
        raise CorruptRecordError(f"unknown magic byte {header.magic}")
    return header


def _magic_message(magic: int) -> str:
    return (
        f"message format v{magic} (magic {magic}) is not supported; "
        "upgrade the client to one that sends RecordBatch v2 (Kafka 0.11+)"
    )


def validate_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
) -> BatchHeader:
    """Check magic, length bounds and CRC-32C of the batch at ``pos``.

    Raises CorruptRecordError (or UnsupportedMagicError) without touching the records.
    """
    header = read_header(buf, pos)
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batchLength {header.batch_length} is smaller than the header itself"
        )
    end = pos + LOG_OVERHEAD + header.batch_length  # header.size, without the property's call
    if end > len(buf):
        raise CorruptRecordError(
            f"batch of {header.size} bytes runs past the end ({len(buf) - pos} bytes remain)"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative lastOffsetDelta or record count")
    if check_crc:
        computed = crc32c(memoryview(buf)[pos + _CRC_START : end])
        if computed != header.crc:
            raise CorruptRecordError(
                f"CRC mismatch: stored {header.crc:#010x}, computed {computed:#010x}"
            )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    (length,) = _INT32.unpack_from(buf, pos + 8)
    return crc32c(memoryview(buf)[pos + _CRC_START : pos + LOG_OVERHEAD + length])


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets by patching 8 bytes; the CRC does not cover them."""
    _INT64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and maxTimestamp, then re-CRC.

    This touches only header fields (records keep their deltas), as Kafka does.
    """
    (attributes,) = struct.unpack_from(">h", buf, pos + 21)
    struct.pack_into(">h", buf, pos + 21, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + 35, timestamp_ms)
    _UINT32.pack_into(buf, pos + 17, compute_crc(buf, pos))


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch; stop at a partial batch at the end.

    A fetch response may end in a partial batch (the broker cut it at max_bytes); that is
    normal and not an error.
    """
    end = len(buf) if end is None else end
    while end - pos >= BATCH_HEADER_SIZE:
        header = read_header(buf, pos)
        if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"batchLength {header.batch_length} at position {pos}")
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


def _decode_records(
    data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    out: list[Record] = []
    pos = 0
    end = len(data)
    for _ in range(count):
        length, pos = decode_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("record length runs past the end of the batch")
        attributes = data[pos]
        pos += 1
        ts_delta, pos = decode_varint(data, pos)
        offset_delta, pos = decode_varint(data, pos)
        key_len, pos = decode_varint(data, pos)
        if key_len >= 0:
            key = bytes(data[pos : pos + key_len])
            pos += key_len
        else:
            key = None
        value_len, pos = decode_varint(data, pos)
        if value_len >= 0:
            value = bytes(data[pos : pos + value_len])
            pos += value_len
        else:
            value = None
        n_headers, pos = decode_varint(data, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hk_len, pos = decode_varint(data, pos)
            if hk_len < 0:
                raise CorruptRecordError("record header key may not be null")
            hkey = bytes(data[pos : pos + hk_len]).decode("utf-8", "replace")
            pos += hk_len
            hv_len, pos = decode_varint(data, pos)
            if hv_len >= 0:
                hval: bytes | None = bytes(data[pos : pos + hv_len])
                pos += hv_len
            else:
                hval = None
            headers.append((hkey, hval))
        if pos != record_end:
            raise CorruptRecordError(
                f"record declared {length} bytes but its fields took {length + pos - record_end}"
            )
        out.append(
            Record(
                offset=base_offset + offset_delta,
                timestamp=base_timestamp + ts_delta,
                key=key,
                value=value,
                headers=tuple(headers),
                attributes=attributes,
            )
        )
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after {count} records")
    return out


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for hkey, hval in headers:
        hk = hkey.encode("utf-8")
        write_varint(body, len(hk))
        body += hk
        if hval is None:
            body.append(1)
        else:
            write_varint(body, len(hval))
            body += hval
    write_varint(out, len(body))
    out += body


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: the header plus its records, decoded on first access."""

    header: BatchHeader
    raw: bytes = field(repr=False)

    @classmethod
    def from_bytes(
        cls, buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
    ) -> "RecordBatch":
        header = validate_batch(buf, pos, check_crc=check_crc)
        return cls(header, bytes(buf[pos : pos + header.size]))

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    def payload(self) -> bytes:
        """The record bytes, decompressed."""
        body = self.raw[BATCH_HEADER_SIZE:]
        codec = self.header.compression
        if codec is Compression.NONE:
            return body
        return decompress(codec, body)

    def records(self) -> list[Record]:
        h = self.header
        try:
            data = self.payload()
        except CompressionError as exc:
            raise CorruptRecordError(str(exc)) from None
        try:
            return _decode_records(data, h.records_count, h.base_offset, h.base_timestamp)
        except VarintError as exc:  # records' boundary: a bad varint is an invalid record
            raise InvalidRecordError(str(exc)) from None


def build_batch(
    records: Iterable[
        tuple[bytes | None, bytes | None]
        | tuple[bytes | None, bytes | None, int]
        | tuple[bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]]
        | Record
    ],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    timestamp: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
    control: bool = False,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode a RecordBatch v2.

    ``records`` items are (key, value), (key, value, timestamp_ms),
    (key, value, timestamp_ms, headers) or Record objects (whose offset is taken relative
    to ``base_offset``). ``offset_deltas``/``last_offset_delta`` let compaction keep a
    batch's offset range while dropping records from it.
    """
    import time

    now = int(time.time() * 1000) if timestamp is None else timestamp
    items: list[tuple[bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]], int]]
    items = []
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            items.append((rec.key, rec.value, rec.timestamp, rec.headers, rec.offset - base_offset))
            continue
        key, value = rec[0], rec[1]
        ts = rec[2] if len(rec) > 2 else now  # type: ignore[misc]
        hdrs = rec[3] if len(rec) > 3 else ()  # type: ignore[misc]
        delta = offset_deltas[i] if offset_deltas is not None else i
        items.append((key, value, ts, hdrs, delta))
    if offset_deltas is not None and len(offset_deltas) != len(items):
        raise ValueError("offset_deltas must have one entry per record")

    if items:
        # With a delete horizon (KIP-534) baseTimestamp holds the horizon; deltas may be negative.
        base_ts = items[0][2] if delete_horizon_ms is None else delete_horizon_ms
        max_ts = max(it[2] for it in items)
    else:
        base_ts = max_ts = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
    body = bytearray()
    for key, value, ts, hdrs, delta in items:
        _encode_record(body, delta, ts - base_ts if items else 0, key, value, hdrs)
    if last_offset_delta is None:
        last_offset_delta = max((it[4] for it in items), default=0)

    codec = Compression(compression)
    payload = compress(codec, bytes(body)) if codec is not Compression.NONE else bytes(body)
    attributes = int(codec) | (int(timestamp_type) << 3)
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    batch = bytearray(BATCH_HEADER_SIZE)
    batch += payload
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    _UINT32.pack_into(batch, 17, crc32c(memoryview(batch)[_CRC_START:]))
    return bytes(batch)


def rebuild_batch(
    header: BatchHeader,
    records: Iterable[Record],
    *,
    compression: Compression | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """The batch ``header`` came from, rebuilt to hold ``records`` (some or all of its own).

    Kept from the header: base offset and lastOffsetDelta (so a compacted batch keeps its
    offset range), producer id, epoch and base sequence, partition leader epoch, timestamp
    type and the transactional and control flags; the codec too, unless ``compression``
    names another.
    ``delete_horizon_ms`` (KIP-534) is written when given, never carried over by itself.

    Timestamps: a log-append-time batch keeps its maxTimestamp, the append time (its records
    carry create-time deltas). With no records left it is Kafka's ``writeEmptyHeader``:
    uncompressed, baseTimestamp and maxTimestamp both the header's maxTimestamp. The log
    (recompression to ``compression.type``) and the cleaner (dropped records, empty batches,
    delete horizons) both rebuild batches with this.
    """
    records = list(records)
    data = bytearray(
        build_batch(
            records,
            base_offset=header.base_offset,
            last_offset_delta=header.last_offset_delta,
            compression=(header.compression if compression is None else compression) if records else Compression.NONE,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            transactional=header.is_transactional,
            control=header.is_control,
            delete_horizon_ms=delete_horizon_ms if records else None,
        )
    )
    if not records:
        _INT64.pack_into(data, 27, header.max_timestamp)  # baseTimestamp
    elif header.timestamp_type != TimestampType.LOG_APPEND_TIME:
        return bytes(data)
    _INT64.pack_into(data, 35, header.max_timestamp)  # maxTimestamp
    _UINT32.pack_into(data, 17, compute_crc(data))
    return bytes(data)
