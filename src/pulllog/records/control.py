"""Control batches: the transaction markers (KIP-98) only the broker writes into a partition.

A control batch is a RecordBatch v2 with the *control* (bit 5) and *transactional* (bit 4)
attribute bits set, the producer id and epoch of the transaction it ends, no sequence
(-1), and exactly one record, in Kafka's format (``ControlRecordType``,
``EndTransactionMarker``)::

    key     version int16 (0)   type int16 (0 = ABORT, 1 = COMMIT)
    value   version int16 (0)   coordinatorEpoch int32

A commit marker makes the producer's batches since its previous marker visible to
read_committed consumers; an abort marker hides them. Kafka uses other control types too
(2 and up: KRaft's leader change, snapshot header and footer, ...); they never appear in a
partition's data, and a reader that meets one treats it as no marker at all.

Readers: the log cleaner (which data batches are aborted), producer-state replay (a
marker ends a transaction), ``pulllog inspect segment`` and the consumer (skip control
batches, drop aborted data) all decode markers here. Decoding never trusts the bytes: a
key shorter than 4 bytes or a negative version is ``CorruptRecordError``; a newer key
version is read as version 0, as Kafka does.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .batch import NO_SEQUENCE, RecordBatch, build_batch
from .errors import CorruptRecordError

__all__ = [
    "ControlRecord",
    "ControlType",
    "build_control_batch",
    "parse_control_record",
    "parse_coordinator_epoch",
    "read_control_record",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A decoded control record: ``type`` is a ControlType, or the raw int of a type this
    module does not know. ``coordinator_epoch`` is -1 when the value is not a transaction
    marker's."""

    version: int
    type: ControlType | int
    coordinator_epoch: int = -1

    @property
    def is_marker(self) -> bool:
        return isinstance(self.type, ControlType)


def _key_fields(key: bytes | bytearray | memoryview | None) -> tuple[int, int]:
    if key is None or len(key) < _KEY.size:
        size = "no key" if key is None else f"{len(key)} byte(s)"
        raise CorruptRecordError(f"a control record key needs {_KEY.size} bytes, found {size}")
    version, ctype = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has the invalid version {version}")
    return version, ctype


def parse_control_record(key: bytes | bytearray | memoryview | None) -> ControlType:
    """The marker type of a control record's key; CorruptRecordError when the key is not a
    transaction marker's (too short, a negative version, another control type)."""
    _version, ctype = _key_fields(key)
    try:
        return ControlType(ctype)
    except ValueError:
        raise CorruptRecordError(f"control record type {ctype} is not a transaction marker") from None


def parse_coordinator_epoch(value: bytes | bytearray | memoryview | None) -> int:
    """The coordinator epoch in a transaction marker's value (Kafka's EndTransactionMarker)."""
    if value is None or len(value) < _VALUE.size:
        size = "no value" if value is None else f"{len(value)} byte(s)"
        raise CorruptRecordError(f"a transaction marker's value needs {_VALUE.size} bytes, found {size}")
    version, epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker value has the invalid version {version}")
    return epoch


def read_control_record(batch: RecordBatch) -> ControlRecord | None:
    """The control record of a control batch; None for a data batch, or for a control batch
    left with no record (Kafka: the cleaner emptied it, so it ends nothing). Raises
    CorruptRecordError for a damaged key or marker value."""
    if not batch.header.is_control:
        return None
    records = batch.records()
    if not records:
        return None
    record = records[0]
    version, ctype = _key_fields(record.key)
    try:
        return ControlRecord(version, ControlType(ctype), parse_coordinator_epoch(record.value))
    except ValueError:  # a control type this module does not know: not a marker
        return ControlRecord(version, ctype)


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker batch (COMMIT when ``commit``, else ABORT), as the broker writes
    it: control + transactional, one record at ``timestamp_ms``, no sequence."""
    ctype = ControlType.COMMIT if commit else ControlType.ABORT
    key = _KEY.pack(CONTROL_KEY_VERSION, int(ctype))
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, timestamp_ms)],
        base_offset=base_offset,
        timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )
