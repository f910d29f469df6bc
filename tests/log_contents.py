"""What a partition log holds, read from its start through the normal read path (for asserting on it)."""

from __future__ import annotations

from pulllog.log import Log
from pulllog.records import RecordBatch


def all_batches(log: Log) -> list[RecordBatch]:
    """Every batch from the log start offset to the log end offset."""
    out: list[RecordBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = log.read_batches(offset, 8 << 20)
        assert batches, f"nothing readable at offset {offset} (log end {log.log_end_offset})"
        out += batches
        offset = batches[-1].last_offset + 1
    return out


def all_values(log: Log) -> list[bytes | None]:
    """Every record's value, in offset order."""
    return [r.value for b in all_batches(log) for r in b.records()]
