"""The columns a pulllog record becomes in Spark and in Parquet, and the decoder that fills them.

One schema, shared by the PySpark data source, ``pulllog export`` (both engines) and every
Parquet file the export writes::

    column         Spark                               Arrow / Parquet
    topic          string                              string
    partition      int                                 int32
    offset         long                                int64
    timestamp      timestamp                           timestamp[us, tz=UTC]
    timestampType  int (0 CreateTime, 1 LogAppendTime) int32
    key            binary                              binary   (null: no key)
    value          binary                              binary   (null: a tombstone)
    headers        array<struct<key string,            list<element: struct<key: string,
                                value binary>>               value: binary>>

Rules this module keeps:

- Arrow batches handed to Spark must match the schema Spark derives from the DDL exactly:
  int32 partition, microsecond timestamps in UTC, a list item named ``element``, every field
  nullable, this column order. ``ARROW_SCHEMA`` is that schema (a test compares it with
  pyspark's own conversion).
- Timestamps are microseconds, never nanoseconds: Spark rejects Parquet TIMESTAMP(NANOS).
  Kafka's are milliseconds, so the conversion is exact.
- Control batches (transaction markers) are not records and are skipped. A batch is decoded
  only from ``start``; records below it (the broker returns the whole batch that holds the
  fetch offset) and at or past ``end`` are dropped.
- With LogAppendTime every record of a batch carries the batch's max timestamp, as Kafka's
  consumer reports it.

Decoding is columnar: records go straight into per-column Python lists (no object per
record), and the varints every record has (length, timestamp and offset deltas, key and value
lengths) take a one-byte (two for the lengths) fast path inline, because a function call per
field costs as much as decoding it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..log.compression import Compression, CompressionError, decompress
from ..log.records import BATCH_HEADER_SIZE, BatchHeader, CorruptRecordError, decode_varint

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SPARK_DDL", "ColumnBuilder", "empty_batch"]

SPARK_DDL = (
    "topic string, partition int, offset long, timestamp timestamp, timestampType int, "
    "key binary, value binary, headers array<struct<key: string, value: binary>>"
)

_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.field("element", _HEADER_STRUCT))),
])
COLUMNS = tuple(ARROW_SCHEMA.names)

_TIMESTAMP_TYPE_MASK = 0x08
_CONTROL_MASK = 0x20


@dataclass(slots=True)
class ColumnBuilder:
    """Accumulates the records of one partition, batch by batch, into Arrow columns."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # ms
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    header_offsets: list[int] = field(default_factory=lambda: [0])
    header_keys: list[str] = field(default_factory=list)
    header_values: list[bytes | None] = field(default_factory=list)
    value_bytes: int = 0  # key + value bytes added, for progress and summaries

    def __len__(self) -> int:
        return len(self.offsets)

    def add_batch(self, buf: bytes | memoryview, pos: int, header: BatchHeader, start: int, end: int) -> None:
        """Decode the batch at ``buf[pos:]`` and keep its records with start <= offset < end."""
        if header.attributes & _CONTROL_MASK or header.next_offset <= start or header.base_offset >= end:
            return
        body = buf[pos + BATCH_HEADER_SIZE:pos + header.size]
        codec = header.compression
        try:
            data = bytes(body) if codec is Compression.NONE else decompress(codec, bytes(body))
        except CompressionError as exc:
            raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}") from None
        log_append = bool(header.attributes & _TIMESTAMP_TYPE_MASK)
        try:
            self._decode(data, header.records_count, header.base_offset, header.base_timestamp,
                         header.max_timestamp if log_append else None, start, end)
        except (IndexError, ValueError) as exc:
            raise CorruptRecordError(f"batch at offset {header.base_offset} does not decode: {exc}") from None

    def _decode(self, data: bytes, count: int, base_offset: int, base_timestamp: int,
                log_append_time: int | None, start: int, end: int) -> None:
        offsets, timestamps, ts_types = self.offsets, self.timestamps, self.timestamp_types
        keys, values = self.keys, self.values
        h_offsets, h_keys, h_values = self.header_offsets, self.header_keys, self.header_values
        ts_type = 0 if log_append_time is None else 1
        varint = decode_varint  # the slow path: 3 bytes and more
        nbytes = 0
        pos = 0
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    length = (v >> 1) ^ -(v & 1)
                    pos += 2
                else:
                    length, pos = varint(data, pos)
            record_end = pos + length
            pos += 1  # record attributes: unused
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = varint(data, pos)
            b = data[pos]
            if b < 0x80:
                od = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                od, pos = varint(data, pos)
            offset = base_offset + od
            if offset < start or offset >= end:
                pos = record_end
                continue
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    n = (v >> 1) ^ -(v & 1)
                    pos += 2
                else:
                    n, pos = varint(data, pos)
            if n >= 0:
                key: bytes | None = data[pos:pos + n]
                pos += n
                nbytes += n
            else:
                key = None
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    n = (v >> 1) ^ -(v & 1)
                    pos += 2
                else:
                    n, pos = varint(data, pos)
            if n >= 0:
                value: bytes | None = data[pos:pos + n]
                pos += n
                nbytes += n
            else:
                value = None
            b = data[pos]
            if b == 0:  # no headers: the common case
                pos += 1
            else:
                n_headers, pos = varint(data, pos)
                for _h in range(n_headers):
                    n, pos = varint(data, pos)
                    if n < 0:
                        raise ValueError("a record header key may not be null")
                    h_keys.append(data[pos:pos + n].decode("utf-8", "replace"))
                    pos += n
                    n, pos = varint(data, pos)
                    if n >= 0:
                        h_values.append(data[pos:pos + n])
                        pos += n
                    else:
                        h_values.append(None)
            if pos != record_end:
                raise ValueError(f"record at offset {offset} declared {length} bytes but its fields took more or less")
            offsets.append(offset)
            timestamps.append(base_timestamp + ts_delta if log_append_time is None else log_append_time)
            ts_types.append(ts_type)
            keys.append(key)
            values.append(value)
            h_offsets.append(len(h_keys))
        self.value_bytes += nbytes

    def to_batch(self) -> pa.RecordBatch:
        """The records so far as one Arrow batch in ``ARROW_SCHEMA``; the builder is emptied."""
        n = len(self.offsets)
        headers = pa.ListArray.from_arrays(
            pa.array(self.header_offsets, pa.int32()),
            pa.StructArray.from_arrays(
                [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
                fields=list(_HEADER_STRUCT)),
            type=ARROW_SCHEMA.field("headers").type,
        )
        ts_ms = pa.array(self.timestamps, pa.int64())
        batch = pa.RecordBatch.from_arrays([
            pa.array([self.topic] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(ts_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            headers,
        ], schema=ARROW_SCHEMA)
        self.offsets, self.timestamps, self.timestamp_types = [], [], []
        self.keys, self.values = [], []
        self.header_offsets, self.header_keys, self.header_values = [0], [], []
        return batch


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
