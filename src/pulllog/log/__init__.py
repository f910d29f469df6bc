"""The storage engine: segments, indexes, the partition log, the cleaner, producer state.

The bytes it stores are RecordBatch v2, defined one layer down in :mod:`pulllog.records`.
"""

from .config import ConfigError, LogConfig
from .log import AppendInfo, Log, OffsetOutOfRangeError, RecordErrors, RecordTooLargeError
from .segment import FileSlice, LogSegment

__all__ = [
    "AppendInfo",
    "ConfigError",
    "FileSlice",
    "Log",
    "LogConfig",
    "LogSegment",
    "OffsetOutOfRangeError",
    "RecordErrors",
    "RecordTooLargeError",
]
