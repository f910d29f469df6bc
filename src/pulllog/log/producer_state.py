"""Idempotent and transactional producers' state for one partition log (KIP-98, KIP-360),
as Kafka's ProducerStateManager / ProducerStateEntry / ProducerAppendInfo keep it.

For every producer id seen in the log the broker keeps the producer's epoch and the metadata
of its last ``NUM_BATCHES_TO_RETAIN`` (5) data batches: first and last sequence, first and
last offset, max timestamp. A producer keeps at most 5 requests in flight per partition, so
any batch it may retry is among them.

Rules on append of a data batch with producerId >= 0 (``check_append``), each batch of a
request checked against the state left by the batches before it:

* producerEpoch < 0 or baseSequence < 0 -> INVALID_RECORD (Kafka's LogValidator).
* same epoch, same first and last sequence as a cached batch -> a retry of a batch already
  in the log: nothing is appended, the answer is NONE with the original offsets (Kafka does
  this; clients take it as success). A request whose batches are all duplicates gets the
  first one's offsets; one that mixes duplicates and new batches is refused (INVALID_RECORD):
  its new batches could not be given a truthful base offset.
* epoch lower than the known one -> INVALID_PRODUCER_EPOCH (47; Kafka answers it instead of
  PRODUCER_FENCED since 2.7).
* a new (higher) epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
* same epoch: firstSeq must be lastSeq + 1 (int32 wrap: after 2**31 - 1 comes 0), else 45.
* unknown producer id: any sequence is accepted. Since KIP-360 Kafka no longer answers
  UNKNOWN_PRODUCER_ID: the state may be gone because retention, DeleteRecords or expiry
  removed it, and the producer must be able to carry on.

Transactions. A producer's first transactional data batch (attributes bit 4) after a marker
starts its transaction at that batch's base offset (``current_txn_first_offset``); the
partition's *first unstable offset* is the smallest of these, and the last stable offset
(LSO) is min(first unstable offset, high watermark). A non-transactional batch from a
producer whose transaction is open is refused (INVALID_TXN_STATE). A control batch (a
COMMIT or ABORT marker, written by the broker for the coordinator) ends the producer's
transaction, checked first as Kafka checks it:

* its producer epoch older than the producer's -> INVALID_PRODUCER_EPOCH (the caller
  answers PRODUCER_FENCED / INVALID_PRODUCER_EPOCH);
* its coordinator epoch older than the last marker's -> TRANSACTION_COORDINATOR_FENCED
  (a zombie coordinator).

It then records the coordinator epoch, takes the marker's producer epoch (a new epoch
drops the cached batches, as for data) and clears ``current_txn_first_offset``. A marker
that ends an open transaction answers a ``CompletedTxn``; an aborted one becomes an entry
of the marker segment's ``.txnindex`` (txn_index.py), with the LSO just after it. A marker
with nothing open (an empty transaction) changes no offset and indexes nothing. A producer
with an open transaction never expires.

The state only moves forward while the log does; it is rebuilt (never patched) when the log
is truncated, and entries expire after ``producer.id.expiration.ms`` without a batch
(judged, as Kafka does, by the last batch's max timestamp).

Snapshots (crash safety). ``<offset>.snapshot`` (20-digit offset, like segment names) holds
the state of every batch below ``offset``; one is written when a segment is rolled (at the
new segment's base offset) and on clean close (at the log end offset), the newest
``SNAPSHOTS_TO_KEEP`` are kept. Loading takes the newest snapshot whose offset lies within
[first segment's base offset, log end offset] and reads the batch headers after it (the
producer fields are in the v2 header: no record is decoded). A snapshot past the log end
(the tail was lost in a crash or truncated) or before the first segment (the batches after
it are gone, so it would be stale) is deleted; a corrupt one is deleted and the next older
one tried; with none left the whole log's headers are scanned. A snapshot is written to a
temporary file, fsynced, renamed, and the directory fsynced (at roll and at clean close, as
Kafka flushes the snapshot of a roll): so a snapshot that survives a crash is whole and its
segment's successor is found with it. A lost or torn one would cost a longer scan only,
never correctness (it is checked by its CRC, and the batches after it are replayed).
Format (big-endian); version 2 adds Kafka's snapshot fields for transactions (version 1,
written before transactions existed, is still read: its producers have none open)::

    version         int16   2
    crc             uint32  CRC-32C of everything after this field
    producerCount   int32
    producerCount times:
        producerId      int64
        producerEpoch   int16
        lastTimestamp   int64
        coordinatorEpoch        int32   (v2) the last marker's, -1 before any
        currentTxnFirstOffset   int64   (v2) the open transaction's first offset, -1 if none
        batchCount      int8    0..5, oldest first
        batchCount times:
            firstSequence   int32
            lastSequence    int32
            firstOffset     int64
            lastOffset      int64
            maxTimestamp    int64
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..records.batch import CONTROL_MASK, NO_SEQUENCE, TRANSACTIONAL_MASK, BatchHeader, InvalidRecordError, RecordBatch
from ..records.control import ControlRecord, ControlType, read_control_record
from ..records.crc import crc32c
from .swap import fsync_dir
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "InvalidProducerEpochError",
    "InvalidProducerFieldsError",
    "InvalidTxnStateError",
    "NUM_BATCHES_TO_RETAIN",
    "OutOfOrderSequenceError",
    "ProducerSnapshotView",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "increment_sequence",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOTS_TO_KEEP = 3
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
INT32_MAX = 2**31 - 1

_HEAD = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_PRODUCER_V1 = struct.Struct(">qhqb")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")


# Rejections. They are InvalidRecordError subclasses so an append refuses them like an invalid
# batch: nothing of the request is written.


class InvalidProducerFieldsError(InvalidRecordError):
    """producerId is set but the epoch or sequence is negative (INVALID_RECORD)."""


class OutOfOrderSequenceError(InvalidRecordError):
    """The batch's first sequence does not follow the producer's last one
    (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpochError(InvalidRecordError):
    """The batch's producer epoch is older than the one the log knows (INVALID_PRODUCER_EPOCH)."""


class TransactionCoordinatorFencedError(InvalidProducerEpochError):
    """A marker's coordinator epoch is older than the last marker's: it comes from a
    coordinator that has been replaced (TRANSACTION_COORDINATOR_FENCED)."""


class InvalidTxnStateError(InvalidRecordError):
    """A non-transactional batch from a producer whose transaction is open (INVALID_TXN_STATE)."""


class SnapshotError(ValueError):
    """A snapshot file is damaged or of an unknown version."""


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: int32 sequences wrap to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


MarkerReader = Callable[[int, BatchHeader], "ControlRecord | None"]
"""Decodes the control record of the control batch at a position (they are rare, so only
they are decoded)."""


class BatchMetadata(NamedTuple):  # a tuple: made on every idempotent append, so cheap to build
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp (with LogAppendTime: when it was appended)


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its data is [first_offset, last_offset) and the marker
    is at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerSnapshotView:
    """One producer as DescribeProducers (KIP-664) shows it; -1 for "none"."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:  # a new epoch starts a new sequence: the old batches mean nothing
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)  # the deque drops the oldest beyond 5
        self.last_timestamp = batch.timestamp

    def end_txn(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A marker: Kafka's ``ProducerStateEntry.update(epoch, coordinatorEpoch, timestamp)``."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def view(self) -> ProducerSnapshotView:
        txn = self.current_txn_first_offset
        return ProducerSnapshotView(self.producer_id, self.epoch, self.last_seq, self.last_timestamp,
                                    self.coordinator_epoch, -1 if txn is None else txn)


class ProducerStateManager:
    """The producer state of one partition log; the Log owns it and calls it on every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction (the entries' field, indexed
        # for the LSO, which every read_committed fetch asks for)
        self.ongoing_txns: dict[int, int] = {}

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        """Has ``producer_id`` at ``epoch`` an open transaction in this partition (a
        transactional batch appended, its marker not yet)? Kafka's
        ``UnifiedLog.hasOngoingTransaction``."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None and entry.epoch == epoch

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        ongoing = self.ongoing_txns
        return min(ongoing.values()) if ongoing else None

    def views(self) -> list[ProducerSnapshotView]:
        return [entry.view() for entry in self.producers.values()]

    # ------------------------------------------------------------------ appending

    def check_append(
        self, batches: Sequence[tuple[int, BatchHeader]], markers: MarkerReader | None = None
    ) -> BatchMetadata | None:
        """Check the producer fields of one append before anything is written.

        ``markers`` decodes the control record of a control batch. Returns the original metadata when every
        producer batch of the append is a retry of a cached one (append nothing, answer
        with it), None when all are new and in order. Raises one of this module's errors
        otherwise. Changes nothing."""
        producers = self.producers
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) after this append
        txn_open: dict[int, bool] = {}  # producer id -> transaction open, where this append changed it
        duplicate: BatchMetadata | None = None
        new = 0
        for pos, header in batches:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            entry = producers.get(producer_id)
            if header.attributes & CONTROL_MASK:
                self._check_marker(header, markers(pos, header) if markers else None, entry, pending)
                txn_open[producer_id] = False
                continue
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            if epoch < 0 or first_seq < 0:
                raise InvalidProducerFieldsError(
                    f"batch of producer {producer_id} has epoch {epoch} and base sequence {first_seq}; "
                    "an idempotent producer sends both >= 0"
                )
            if header.attributes & TRANSACTIONAL_MASK:
                txn_open[producer_id] = True
            elif (txn_open[producer_id] if producer_id in txn_open
                  else entry is not None and entry.current_txn_first_offset is not None):
                raise InvalidTxnStateError(
                    f"producer {producer_id} sent a non-transactional batch while its transaction is open; "
                    "commit or abort the transaction first"
                )
            last_seq = increment_sequence(first_seq, header.last_offset_delta)
            new += 1
            if producer_id in pending:
                current_epoch, current_last = pending[producer_id]
            elif entry is not None:
                current_epoch, current_last = entry.epoch, entry.last_seq
            else:
                pending[producer_id] = (epoch, last_seq)  # unknown producer: any sequence (KIP-360)
                continue
            if epoch == current_epoch and (current_last == NO_SEQUENCE or in_sequence(current_last, first_seq)):
                pending[producer_id] = (epoch, last_seq)  # the common case: the next batch
                continue
            if entry is not None:
                found = entry.find_duplicate(epoch, first_seq, last_seq)
                if found is not None:
                    duplicate = duplicate or found
                    new -= 1
                    continue
            if epoch < current_epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} sent epoch {epoch}, older than the current epoch {current_epoch}; "
                    "another instance with a newer epoch has taken over"
                )
            if epoch != current_epoch:
                if first_seq != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {producer_id} started epoch {epoch} at sequence {first_seq}; a new epoch starts at 0"
                    )
            else:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} (epoch {epoch}) sent sequence {first_seq} but the last one "
                    f"in the log is {current_last}; expected {increment_sequence(current_last, 1)}"
                )
            pending[producer_id] = (epoch, last_seq)
        if duplicate is not None and new:
            raise InvalidProducerFieldsError(
                "the request repeats batches already in the log together with new ones; "
                "resend each batch as it was first sent"
            )
        return duplicate

    @staticmethod
    def _check_marker(
        header: BatchHeader,
        marker: ControlRecord | None,
        entry: ProducerStateEntry | None,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        """Kafka's ``appendEndTxnMarker`` checks: producer epoch, then coordinator epoch."""
        producer_id, epoch = header.producer_id, header.producer_epoch
        if producer_id in pending:
            current_epoch, last_seq = pending[producer_id]
        elif entry is not None:
            current_epoch, last_seq = entry.epoch, entry.last_seq
        else:
            current_epoch, last_seq = epoch, NO_SEQUENCE
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"transaction marker for producer {producer_id} has epoch {epoch}, older than the current "
                f"epoch {current_epoch}; the producer has been fenced"
            )
        if marker is not None and entry is not None and marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"transaction marker for producer {producer_id} has coordinator epoch {marker.coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}; a newer transaction coordinator has taken over"
            )
        pending[producer_id] = (epoch, last_seq if epoch == current_epoch else NO_SEQUENCE)

    def record_append(
        self,
        batches: Iterable[tuple[int, BatchHeader]],
        markers: MarkerReader | None = None,
        on_abort: Callable[[AbortedTxn], None] | None = None,
    ) -> Sequence[CompletedTxn]:
        """Update the state with appended batches (offsets assigned); returns the
        transactions their markers ended (usually none), and hands each aborted one, as
        its ``.txnindex`` entry, to ``on_abort`` at once (the entry's LSO is the one right
        after its marker). No checks: also used to replay the log's batches at load.
        ``markers`` as for ``check_append``."""
        producers = self.producers
        completed: list[CompletedTxn] | None = None
        for pos, header in batches:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            attributes = header.attributes
            epoch = header.producer_epoch
            if attributes & CONTROL_MASK:
                done = self._end_txn(header, markers(pos, header) if markers else None)
                if done is not None:
                    if completed is None:
                        completed = []
                    completed.append(done)
                    if done.aborted and on_abort is not None:
                        on_abort(self.aborted_entry(done))
                continue
            first_seq = header.base_sequence
            if first_seq < 0 or epoch < 0:
                continue
            base_offset = header.base_offset
            delta = header.last_offset_delta
            batch = BatchMetadata(first_seq, increment_sequence(first_seq, delta), base_offset,
                                  base_offset + delta, header.max_timestamp)
            entry = producers.get(producer_id)
            if entry is None:
                entry = producers[producer_id] = ProducerStateEntry(producer_id, epoch, batch.timestamp)
            entry.add_batch(epoch, batch)
            if attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = base_offset  # the transaction starts here
                self.ongoing_txns[producer_id] = base_offset
        return () if completed is None else completed

    def _end_txn(self, header: BatchHeader, marker: ControlRecord | None) -> CompletedTxn | None:
        if marker is None or not marker.is_marker:
            return None  # an emptied control batch (or not a marker) ends nothing
        producer_id = header.producer_id
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, header.producer_epoch,
                                                                     header.max_timestamp)
        first = entry.current_txn_first_offset
        entry.end_txn(header.producer_epoch, marker.coordinator_epoch, header.max_timestamp)
        if first is None:
            return None  # an empty transaction: no offset moves, nothing to index
        self.ongoing_txns.pop(producer_id, None)
        return CompletedTxn(producer_id, first, header.base_offset, marker.type == ControlType.ABORT)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """Kafka's ``lastStableOffset(completedTxn)``: the LSO once ``completed`` has ended
        (call after ``record_append``): the oldest other open transaction's first offset,
        else the offset after the marker."""
        first = self.first_unstable_offset()
        return completed.last_offset + 1 if first is None else first

    def aborted_entry(self, completed: CompletedTxn) -> AbortedTxn:
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.last_stable_offset_after(completed))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many. One with
        an open transaction stays (Kafka: its LSO must not move until a marker ends it)."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp >= expiration_ms and entry.current_txn_first_offset is None]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # ------------------------------------------------------------------ snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self, offset: int, *, sync: bool = False) -> None:
        """Write the state (every batch below ``offset``) to ``<offset>.snapshot``; with
        ``sync``, on disk (the file and its name) before this returns."""
        path = self.snapshot_path(offset)
        tmp = path.with_name(path.name + ".tmp")
        data = encode_snapshot(self.producers.values())
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(self.directory)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
            self.snapshot_path(old).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        """Retention removed the segments below ``offset``: older snapshots are stale."""
        for old in self.snapshot_offsets():
            if old < offset:
                self.snapshot_path(old).unlink(missing_ok=True)

    def delete_snapshots_after(self, offset: int) -> None:
        for old in self.snapshot_offsets():
            if old > offset:
                self.snapshot_path(old).unlink(missing_ok=True)

    # ------------------------------------------------------------------ loading

    def load(self, segments: Sequence["LogSegment"], log_end_offset: int) -> list[str]:
        """Rebuild the state from the newest usable snapshot plus the batch headers after it;
        returns problems found (damaged snapshots), for the recovery report."""
        self.producers = {}
        self.ongoing_txns = {}
        first_base = segments[0].base_offset
        problems: list[str] = []
        start: int | None = None
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > log_end_offset or offset < first_base:
                path.unlink(missing_ok=True)  # past a lost tail, or before deleted segments
                continue
            if start is not None:
                continue  # an older usable one: kept for truncation
            try:
                self.producers = decode_snapshot(path.read_bytes())
                start = offset
            except (OSError, SnapshotError) as exc:
                problems.append(f"{path.name}: {exc}; rebuilt from the log instead")
                path.unlink(missing_ok=True)
        self.ongoing_txns = {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                             if e.current_txn_first_offset is not None}
        self._replay(segments, first_base if start is None else start, log_end_offset)
        return problems

    def truncate_and_reload(self, segments: Sequence["LogSegment"], log_end_offset: int) -> None:
        """After the log was truncated to ``log_end_offset``: drop snapshots past it and rebuild."""
        self.delete_snapshots_after(log_end_offset)
        self.load(segments, log_end_offset)

    def _replay(self, segments: Sequence["LogSegment"], start: int, end: int) -> None:
        """Replay the batch headers in [start, end), and rebuild the aborted-transaction
        index entries of the markers among them (entries at or after ``start`` are dropped
        first: they may name markers a crash or a truncation removed)."""
        for segment in segments:
            if segment.next_offset <= start or segment.base_offset >= end:
                continue
            segment.txn_index.truncate_to(start)
            position = 0
            if segment.base_offset < start:
                found = segment.find_batch(start)
                if found is None:
                    continue
                position = found[0]
            try:
                self.record_append(
                    ((pos, header) for pos, header in segment.headers(position) if header.base_offset >= start),
                    lambda pos, header, segment=segment: _read_marker(segment, pos, header),  # type: ignore[misc]
                    segment.txn_index.append,
                )
            except InvalidRecordError as exc:  # recovery checked the tail; this is older damage
                log.warning("%s: producer state rebuilt up to a bad batch header: %s", segment.log_path.name, exc)
                return


def _read_marker(segment: "LogSegment", position: int, header: BatchHeader) -> ControlRecord | None:
    try:
        return read_control_record(RecordBatch(header, segment.read_bytes(position, header.size)))
    except InvalidRecordError as exc:  # CRC-checked by recovery; an unreadable marker ends nothing
        log.warning("%s: transaction marker at offset %d unreadable: %s", segment.log_path.name,
                    header.base_offset, exc)
        return None


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    count = 0
    for entry in entries:
        count += 1
        txn = entry.current_txn_first_offset
        body += _PRODUCER.pack(entry.producer_id, entry.epoch, entry.last_timestamp, entry.coordinator_epoch,
                               -1 if txn is None else txn, len(entry.batches))
        for b in entry.batches:
            body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
    body[0:0] = _COUNT.pack(count)
    return _HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise SnapshotError(f"{len(data)} bytes is too short for a producer snapshot")
    version, crc = _HEAD.unpack_from(data, 0)
    if version not in (1, SNAPSHOT_VERSION):
        raise SnapshotError(f"unknown producer snapshot version {version}")
    body = memoryview(data)[_HEAD.size :]
    if crc32c(body) != crc:
        raise SnapshotError("CRC mismatch")
    (count,) = _COUNT.unpack_from(body, 0)
    pos = _COUNT.size
    producers: dict[int, ProducerStateEntry] = {}
    try:
        for _ in range(count):
            if version == 1:
                producer_id, epoch, last_timestamp, batch_count = _PRODUCER_V1.unpack_from(body, pos)
                coordinator_epoch, txn_first = -1, -1
                pos += _PRODUCER_V1.size
            else:
                producer_id, epoch, last_timestamp, coordinator_epoch, txn_first, batch_count = (
                    _PRODUCER.unpack_from(body, pos))
                pos += _PRODUCER.size
            if not 0 <= batch_count <= NUM_BATCHES_TO_RETAIN:
                raise SnapshotError(f"producer {producer_id} has {batch_count} batches")
            entry = ProducerStateEntry(producer_id, epoch, last_timestamp, coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=None if txn_first < 0 else txn_first)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[producer_id] = entry
    except struct.error:
        raise SnapshotError("the snapshot ends early") from None
    if pos != len(body):
        raise SnapshotError(f"{len(body) - pos} unexpected bytes after the last producer")
    return producers
