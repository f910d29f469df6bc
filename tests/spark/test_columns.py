"""The Arrow columns a batch becomes (no Spark needed): what the export and the data source write."""

from __future__ import annotations

import datetime as dt

import pytest

from pulllog.records import decoding
from pulllog.records.compression import Compression
from pulllog.records.batch import CorruptRecordError, TimestampType, build_batch, read_header
from pulllog.spark import columns
from pulllog.spark.columns import ARROW_SCHEMA, ColumnBuilder


@pytest.fixture(autouse=True, params=["built", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with the decoder in use (C where built) and with the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(columns, "decode_records", decoding.py_decode_records)


def batch_at(base_offset: int, records: list, **kwargs) -> bytes:
    raw = bytearray(build_batch(records, **kwargs))
    raw[0:8] = base_offset.to_bytes(8, "big")
    return bytes(raw)


@pytest.mark.parametrize("codec", list(Compression))
def test_records_inside_the_range_become_one_row_each(codec: Compression) -> None:
    raw = batch_at(100, [(b"k0", b"v0", 1_000), (None, b"v1", 2_000, [("h", b"x"), ("n", None)]),
                         (b"k2", None, 3_000), (b"", b"", 4_000)], compression=codec)
    builder = ColumnBuilder("t", 4)
    builder.add_batch(raw, 0, read_header(raw), 101, 103)  # offsets 101 and 102 only
    rows = builder.to_batch().to_pylist()
    assert builder.to_batch().schema == ARROW_SCHEMA
    utc = dt.timezone.utc
    assert rows == [
        {"topic": "t", "partition": 4, "offset": 101, "timestamp": dt.datetime.fromtimestamp(2, utc),
         "timestampType": 0, "key": None, "value": b"v1", "headers": [{"key": "h", "value": b"x"},
                                                                      {"key": "n", "value": None}]},
        {"topic": "t", "partition": 4, "offset": 102, "timestamp": dt.datetime.fromtimestamp(3, utc),
         "timestampType": 0, "key": b"k2", "value": None, "headers": []},
    ]


def test_log_append_time_gives_every_row_the_batch_max_timestamp() -> None:
    raw = batch_at(0, [(None, b"a", 1_000), (None, b"b", 5_000)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder = ColumnBuilder("t", 0)
    builder.add_batch(raw, 0, read_header(raw), 0, 10)
    assert builder.timestamps == [5_000, 5_000] and builder.timestamp_types == [1, 1]
    assert builder.value_bytes == 2


def test_a_damaged_record_is_a_corrupt_batch() -> None:
    raw = bytearray(batch_at(0, [(None, b"abc")]))
    assert raw[-1] == 0  # the record's header count, its last byte
    raw[-1] = 2  # one header (zigzag 1), but the record ends here
    with pytest.raises(CorruptRecordError, match="batch at offset 0 does not decode"):
        ColumnBuilder("t", 0).add_batch(bytes(raw), 0, read_header(bytes(raw)), 0, 10)
