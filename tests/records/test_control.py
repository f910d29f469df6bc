"""Control batches (transaction markers): Kafka's key/value format, and damage refused."""

from __future__ import annotations

import struct

import pytest

from pulllog.records import CorruptRecordError
from pulllog.records.batch import NO_SEQUENCE, RecordBatch, build_batch
from pulllog.records.control import (
    ControlRecord,
    ControlType,
    build_control_batch,
    parse_control_record,
    parse_coordinator_epoch,
    read_control_record,
)


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_batch_holds_kafkas_control_record(commit: bool) -> None:
    raw = build_control_batch(42, 3, commit, 7, 1_700_000_000_000, base_offset=10)
    batch = RecordBatch.from_bytes(raw)
    h = batch.header
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset) == (42, 3, NO_SEQUENCE, 10)
    assert h.records_count == 1 and h.max_timestamp == 1_700_000_000_000
    [record] = batch.records()
    # Kafka's bytes: key = version 0, type (0 abort, 1 commit); value = version 0, coordinator epoch.
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 7)
    expected = ControlType.COMMIT if commit else ControlType.ABORT
    assert parse_control_record(record.key) is expected
    assert parse_coordinator_epoch(record.value) == 7
    assert read_control_record(batch) == ControlRecord(0, expected, 7)


def test_a_data_batch_has_no_control_record() -> None:
    assert read_control_record(RecordBatch.from_bytes(build_batch([(b"k", b"v")]))) is None


def test_an_emptied_control_batch_ends_nothing() -> None:
    # The cleaner may leave a control batch with no record: Kafka reads it as no marker.
    raw = build_batch([], producer_id=1, producer_epoch=0, transactional=True, control=True)
    assert read_control_record(RecordBatch.from_bytes(raw)) is None


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", struct.pack(">hh", -1, 0)])
def test_a_damaged_key_is_corrupt(key: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        parse_control_record(key)


def test_a_newer_key_version_is_read_as_version_0() -> None:
    assert parse_control_record(struct.pack(">hhh", 1, 0, 99)) is ControlType.ABORT


def test_another_control_type_is_no_marker() -> None:
    with pytest.raises(CorruptRecordError, match="not a transaction marker"):
        parse_control_record(struct.pack(">hh", 0, 2))
    raw = build_batch([(struct.pack(">hh", 0, 2), b"leader-change")], control=True)
    assert read_control_record(RecordBatch.from_bytes(raw)) == ControlRecord(0, 2)


@pytest.mark.parametrize("value", [None, b"\x00\x00\x00", struct.pack(">hi", -1, 3)])
def test_a_damaged_marker_value_is_corrupt(value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        parse_coordinator_epoch(value)
