"""The records one Fetch response returned for one partition, decoded as the application reads.

This is the consumer's hot loop, with no I/O (the Consumer feeds it bytes). A fetch response
carries, per partition, a byte range of the leader's log: whole RecordBatch v2 batches (see
:mod:`pulllog.records.batch` for the layout) and possibly, at the end, the first part of one
more batch that the broker cut at ``max_bytes``.

Rules a ``CompletedFetch`` keeps:

- On arrival only the batch headers are read (two small struct unpacks per batch), to find
  where the complete batches end: ``next_offset`` is where the next fetch starts, so the
  consumer can send it before the application has read a single record (prefetch). A
  partial batch at the end is dropped; the next fetch returns it whole.
- A batch is decompressed and decoded only when the application reaches it. With
  ``check_crcs`` its CRC-32C (C extension, over the whole batch) is checked first; a
  mismatch raises :class:`CorruptRecordError` at that batch, after the records before it.
- The broker returns the batch that *holds* the fetch offset, so the first batch may start
  before it: records below the fetch offset are skipped, and whole batches below it are
  skipped undecoded.
- Control batches (transaction markers) are never returned. With ``read_committed``, a
  transactional batch is dropped while its producer id is in an aborted transaction:
  Kafka's algorithm (``CompletedFetch.java``): the response lists each aborted transaction
  as (producer id, first offset); before a batch, every listed transaction starting at or
  before its last offset makes its producer "aborted"; that producer's ABORT marker (a
  control batch) ends it.
- With ``LogAppendTime`` every record of a batch carries the batch's max timestamp.

Records are :class:`~pulllog.client.types.ConsumerRecord`, made by
:func:`pulllog.records.decoding.decode_records` (in C where the extension is built).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from ..records.compression import CompressionError, decompress
from ..records.decoding import decode_records
from ..records.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD
from ..records.control import ControlType
from .errors import KafkaError
from .types import ConsumerRecord, TopicPartition

__all__ = ["CompletedFetch", "CorruptRecordError"]

# baseOffset, batchLength, partitionLeaderEpoch, magic: enough to walk from batch to batch
_WALK = struct.Struct(">qiib")
_INT32 = struct.Struct(">i")
# From offset 17: crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, recordsCount
_REST = struct.Struct(">Ihiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20


class CorruptRecordError(KafkaError):
    """A fetched batch failed its CRC-32C check or does not decode (Kafka: CORRUPT_MESSAGE)."""

    def __init__(self, tp: TopicPartition, offset: int, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)
        self.retriable = False  # fetching the same bytes again does not help
        self.topic_partition = tp
        self.offset = offset


# ---------------------------------------------------------------------------- one partition's data


class CompletedFetch:
    """One partition's records from one fetch response; read with :meth:`take`.

    ``fetch_offset`` is the offset the fetch asked for; ``next_offset`` the offset after the
    last complete batch (None if there is none: nothing to read, fetch again from
    ``fetch_offset``). A batch that is damaged beyond walking past it (bad magic, impossible
    length) stops the walk: the records before it are readable, then ``take`` raises.
    """

    __slots__ = ("tp", "fetch_offset", "next_offset", "_data", "_pos", "_end", "_check_crcs",
                 "_read_committed", "_aborted", "_aborted_producers", "_records", "_index", "_error",
                 "_topic", "_partition")

    def __init__(self, tp: TopicPartition, data: bytes, fetch_offset: int, *, check_crcs: bool = True,
                 aborted_transactions: Iterable[tuple[int, int]] | None = None,
                 read_committed: bool = False, must_hold_a_batch: bool = False) -> None:
        self.tp = tp
        self._topic, self._partition = tp.topic, tp.partition
        self.fetch_offset = fetch_offset
        self._data = data
        self._pos = 0
        self._check_crcs = check_crcs
        self._read_committed = read_committed
        # (first offset, producer id), smallest first
        self._aborted: list[tuple[int, int]] = []
        if read_committed and aborted_transactions:
            self._aborted = sorted((first, pid) for pid, first in aborted_transactions)
        self._aborted_producers: set[int] = set()
        self._records: list[ConsumerRecord] = []
        self._index = 0
        self._error: CorruptRecordError | None = None
        self.next_offset: int | None = None
        self._end = self._walk(must_hold_a_batch)

    def _walk(self, must_hold_a_batch: bool) -> int:
        """Find the end of the complete batches (and ``next_offset``) from the headers alone."""
        data = self._data
        size = len(data)
        pos = 0
        while size - pos >= 17:
            base_offset, batch_length, _epoch, magic = _WALK.unpack_from(data, pos)
            if magic != 2:
                self._error = self._corrupt(base_offset, f"a batch with magic byte {magic} at offset {base_offset} "
                                            f"of {self._describe()} (only RecordBatch v2, magic 2, is supported)")
                return pos
            if batch_length < _MIN_BATCH_LENGTH:
                self._error = self._corrupt(base_offset, f"the batch at offset {base_offset} of {self._describe()} "
                                            f"claims {batch_length} bytes, less than its own header")
                return pos
            end = pos + LOG_OVERHEAD + batch_length
            if end > size:
                break  # a partial batch: the broker cut the response here
            (last_offset_delta,) = _INT32.unpack_from(data, pos + 23)
            self.next_offset = base_offset + last_offset_delta + 1
            pos = end
        if pos == 0 and size and must_hold_a_batch:
            # The broker returns at least one whole batch to the first partition with data
            # (KIP-74); bytes without one mean the length field was damaged.
            self._error = self._corrupt(self.fetch_offset, f"the fetch of {self._describe()} at offset "
                                        f"{self.fetch_offset} returned {size} bytes but no complete batch "
                                        "(a damaged batch length)")
        return pos

    def _describe(self) -> str:
        return f"{self._topic}-{self._partition}"

    def _corrupt(self, offset: int, what: str) -> CorruptRecordError:
        return CorruptRecordError(self.tp, offset, f"corrupt data: {what}")

    @property
    def broken(self) -> bool:
        """The data ends in a batch we cannot walk past: fetching further is pointless."""
        return self._error is not None

    @property
    def has_data(self) -> bool:
        """Whether there is anything to hand out: records, or an error to raise."""
        return self._end > 0 or self._error is not None

    @property
    def drained(self) -> bool:
        return self._index >= len(self._records) and self._pos >= self._end and self._error is None

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records (fewer once the data runs out: then ``drained``).

        Raises CorruptRecordError on reaching a damaged batch, unless records come first: then
        they are returned and the next call raises. The error stays until the data is dropped.
        """
        out: list[ConsumerRecord] = []
        while True:
            records, index = self._records, self._index
            available = len(records) - index
            if available:
                room = max_records - len(out)
                if room >= available:
                    piece = records[index:] if index else records
                    self._records, self._index = [], 0  # the caller owns the list now
                else:
                    piece = records[index:index + room]
                    self._index = index + room
                if out:
                    out.extend(piece)
                else:
                    out = piece
                if len(out) >= max_records:
                    return out
            try:
                if not self._next_batch():
                    return out
            except CorruptRecordError:
                if out:
                    return out
                raise

    def next_record(self) -> ConsumerRecord | None:
        """One record, or None once drained (the iterator's path: no list per record)."""
        index = self._index
        if index < len(self._records):
            self._index = index + 1
            return self._records[index]
        if not self._next_batch():
            return None
        self._index = 1
        return self._records[0]

    def _next_batch(self) -> bool:
        """Decode the next batch that has records for the application; False at the end."""
        if self._error is not None and self._pos >= self._end:
            raise self._error
        data = self._data
        while self._pos < self._end:
            pos = self._pos
            base_offset, batch_length, _epoch, _magic = _WALK.unpack_from(data, pos)
            (crc, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, _pepoch, _seq,
             count) = _REST.unpack_from(data, pos + 17)
            end = pos + LOG_OVERHEAD + batch_length
            last_offset = base_offset + last_offset_delta
            if self._check_crcs:
                computed = crc32c(memoryview(data)[pos + _CRC_START:end])
                if computed != crc:
                    self._error = self._corrupt(base_offset, (
                        f"the batch at offsets {base_offset}..{last_offset} of {self._describe()} failed its "
                        f"CRC-32C check (stored {crc:#010x}, computed {computed:#010x}): it was damaged on disk or "
                        f"in transit; seek to offset {last_offset + 1} to skip it"))
                    self._end = pos
                    raise self._error
            # Step past the batch first; a decode failure in _decode steps back and parks its error here.
            self._pos = end
            if last_offset < self.fetch_offset:
                continue
            if self._read_committed and producer_id >= 0:
                aborted = self._aborted
                while aborted and aborted[0][0] <= last_offset:
                    self._aborted_producers.add(heapq.heappop(aborted)[1])
                if attributes & _CONTROL_MASK:
                    if self._is_abort_marker(data, pos, end, attributes, base_offset, base_timestamp, count):
                        self._aborted_producers.discard(producer_id)
                    continue
                if attributes & _TRANSACTIONAL_MASK and producer_id in self._aborted_producers:
                    continue
            if attributes & _CONTROL_MASK:
                continue
            records = self._decode(data, pos, end, attributes, base_offset, last_offset, base_timestamp,
                                   max_timestamp, count)
            if base_offset < self.fetch_offset:
                floor = self.fetch_offset
                records = [r for r in records if r.offset >= floor]
            if records:
                self._records = records
                self._index = 0
                return True
        self._records = []
        self._index = 0
        if self._error is not None:
            raise self._error
        return False

    def _decode(self, data: bytes, pos: int, end: int, attributes: int, base_offset: int, last_offset: int,
                base_timestamp: int, max_timestamp: int, count: int) -> list[ConsumerRecord]:
        codec = attributes & _COMPRESSION_MASK
        try:
            if codec:
                payload = decompress(codec, data[pos + BATCH_HEADER_SIZE:end])
                start, stop = 0, len(payload)
            else:
                payload, start, stop = data, pos + BATCH_HEADER_SIZE, end
            return decode_records(ConsumerRecord, payload, start, stop, count, base_offset, base_timestamp,
                                  1 if attributes & _TIMESTAMP_TYPE_MASK else 0, max_timestamp,
                                  self._topic, self._partition)
        except (CompressionError, IndexError, ValueError) as exc:
            self._error = self._corrupt(base_offset, (
                f"the batch at offsets {base_offset}..{last_offset} of {self._describe()} does not decode ({exc}); "
                f"seek to offset {last_offset + 1} to skip it"))
            self._end = self._pos = pos
            raise self._error from None

    def _is_abort_marker(self, data: bytes, pos: int, end: int, attributes: int, base_offset: int,
                         base_timestamp: int, count: int) -> bool:
        records = self._decode(data, pos, end, attributes, base_offset, base_offset, base_timestamp, 0, count)
        key = records[0].key if records else None
        return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == ControlType.ABORT
