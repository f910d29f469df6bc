"""The storage engine: record batches, segments, indexes, the partition log."""

from .compression import Compression
from .config import ConfigError, LogConfig
from .log import AppendInfo, Log, OffsetOutOfRangeError, RecordErrors, RecordTooLargeError
from .records import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    UnsupportedMagicError,
    build_batch,
)
from .segment import FileSlice, LogSegment

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "Compression",
    "ConfigError",
    "CorruptRecordError",
    "FileSlice",
    "InvalidRecordError",
    "Log",
    "LogConfig",
    "LogSegment",
    "OffsetOutOfRangeError",
    "Record",
    "RecordBatch",
    "RecordErrors",
    "RecordTooLargeError",
    "UnsupportedMagicError",
    "build_batch",
]
