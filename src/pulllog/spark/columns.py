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

Records are decoded by the consumer's decoder (:func:`pulllog.records.decoding.decode_records`,
in C where the extension is built), then moved into per-column Python lists. Records of a
batch outside ``[start, end)`` are decoded too (and so validated) but not kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..records.compression import Compression, CompressionError, decompress
from ..client.types import ConsumerRecord
from ..records.decoding import decode_records
from ..records.batch import BATCH_HEADER_SIZE, BatchHeader, CorruptRecordError

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
        records = decode_records(ConsumerRecord, data, 0, len(data), count, base_offset, base_timestamp,
                                 0 if log_append_time is None else 1, log_append_time or 0, self.topic,
                                 self.partition)
        if records and (records[0].offset < start or records[-1].offset >= end):
            records = [r for r in records if start <= r.offset < end]
        if not records:
            return
        self.offsets += [r.offset for r in records]
        self.timestamps += [r.timestamp for r in records]
        self.timestamp_types += [r.timestamp_type for r in records]
        keys = [r.key for r in records]
        values = [r.value for r in records]
        self.keys += keys
        self.values += values
        self.value_bytes += sum(map(len, filter(None, keys))) + sum(map(len, filter(None, values)))
        h_offsets = self.header_offsets
        if any(r.headers for r in records):
            h_keys, h_values = self.header_keys, self.header_values
            for r in records:
                for key, value in r.headers:
                    h_keys.append(key)
                    h_values.append(value)
                h_offsets.append(len(h_keys))
        else:
            h_offsets += [h_offsets[-1]] * len(records)

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
