"""What a damaged or unsupported RecordBatch raises, wherever it is read (log, client, tools)."""

from __future__ import annotations

__all__ = ["CorruptRecordError", "InvalidRecordError", "UnsupportedMagicError"]


class InvalidRecordError(ValueError):
    """The bytes are not a valid RecordBatch (Kafka: CORRUPT_MESSAGE / INVALID_RECORD)."""


class CorruptRecordError(InvalidRecordError):
    """Length bounds or CRC do not hold: the bytes were damaged (Kafka: CORRUPT_MESSAGE)."""


class UnsupportedMagicError(InvalidRecordError):
    """A magic 0/1 message set: pulllog, like Kafka 4, only stores RecordBatch v2."""
