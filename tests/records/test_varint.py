"""records.varint is the one implementation of Kafka's varints; the hot loops that inline
its small cases (net.produce's size reader, the Python record decoder, the producer's record
encoder) must agree with it byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulllog.net import produce
from pulllog.net.guard import MalformedError
from pulllog.records import RecordBatch, build_batch
from pulllog.records.decoding import py_decode_records
from pulllog.records.varint import (
    ZIGZAG,
    ZIGZAG_TABLE_SIZE,
    VarintError,
    decode_varint,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    write_uvarint,
    write_varint,
)


@pytest.mark.parametrize(
    ("data", "value", "end"),
    [
        (b"\x00", 0, 1),
        (b"\x7f", 127, 1),
        (b"\x80\x01", 128, 2),
        (b"\xff\xff\xff\xff\x0f", 2**32 - 1, 5),
    ],
)
def test_uvarint(data: bytes, value: int, end: int) -> None:
    assert read_uvarint(data, 0, len(data)) == (value, end)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff\xff\xff\xff\x01"])
def test_uvarint_truncated_or_longer_than_five_bytes(data: bytes) -> None:
    with pytest.raises(VarintError):
        read_uvarint(data, 0, len(data))


@given(st.integers(0, 2**35 - 1))
def test_uvarint_round_trip(n: int) -> None:
    out = bytearray(b"x")
    write_uvarint(out, n)
    assert bytes(out[1:]) == encode_uvarint(n)
    assert read_uvarint(bytes(out), 1, len(out)) == (n, len(out))


@given(st.integers(-(2**63), 2**63 - 1))
def test_write_varint_and_encode_varint_agree(n: int) -> None:
    out = bytearray()
    write_varint(out, n)
    assert bytes(out) == encode_varint(n)
    assert decode_varint(out, 0) == (n, len(out))


def test_the_zigzag_table_is_encode_varint() -> None:
    assert len(ZIGZAG) == ZIGZAG_TABLE_SIZE
    for n in range(ZIGZAG_TABLE_SIZE):
        out = bytearray()
        write_varint(out, n)
        assert ZIGZAG[n] == out


@given(st.binary(max_size=7))
def test_the_produce_decoders_inlined_size_reader_agrees_with_read_uvarint(data: bytes) -> None:
    try:
        value, position = read_uvarint(data, 0, len(data))
    except VarintError as error:
        with pytest.raises(MalformedError, match=str(error)):
            produce._read_size(data, 0, len(data), True, 4, "size")
    else:
        assert produce._read_size(data, 0, len(data), True, 4, "size") == (value - 1, position)


class _Record:
    __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")


# lengths and deltas on both sides of the one-, two- and three-byte varint boundaries
_sizes = st.sampled_from([0, 1, 63, 64, 65, 8191, 8192, 8193]) | st.integers(0, 9000)
_deltas = st.sampled_from([0, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**40, -(2**40)]) | st.integers()


@given(st.lists(st.tuples(_sizes, _sizes, _deltas), min_size=1, max_size=4))
def test_the_python_decoders_inlined_varints_agree_with_decode_varint(fields: list[tuple[int, int, int]]) -> None:
    base = 2**41
    raw = build_batch([(b"k" * k, b"v" * v, base + max(-base, min(d, 2**62 - base)), []) for k, v, d in fields])
    batch = RecordBatch.from_bytes(raw)
    reference = batch.records()  # the plain reader, one decode_varint call per field
    h = batch.header
    decoded = py_decode_records(_Record, raw, 61, len(raw), h.records_count, h.base_offset,
                                h.base_timestamp, 0, 0, "t", 0)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (r.offset, r.timestamp, r.key, r.value) for r in reference
    ]
