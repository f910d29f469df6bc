"""The C record decoder (pulllog.records._crecords) against the pure-Python one: the same records
from every batch, the same error from every damaged one, and never a crash.

The C extension is optional for a user (no compiler: pure Python), but not for a test run:
where it was not built, ``test_the_c_decoder_is_built`` fails, so a silent fallback cannot
go unnoticed. Set PULLLOG_NO_EXTENSIONS=1 to test the pure-Python decoder alone.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pulllog.client.types import ConsumerRecord
from pulllog.records import decoding
from pulllog.records.batch import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    build_batch,
    encode_varint,
    read_header,
)
from pulllog.records.compression import Compression, decompress
from pulllog.records.extensions import extensions_disabled

NO_EXTENSIONS = extensions_disabled()

try:
    from pulllog.records import _crecords
except ImportError:
    _crecords = None  # type: ignore[assignment]

needs_c = pytest.mark.skipif(_crecords is None, reason="the C extension is not built (test_the_c_decoder_is_built says so)")


def test_the_c_decoder_is_built() -> None:
    if NO_EXTENSIONS:
        assert decoding.IMPLEMENTATION == "python"
        return
    assert _crecords is not None, (
        "pulllog.records._crecords is not built, so the consumer runs the pure-Python decoder at a sixth of the "
        "speed: build it with `pip install -e .` or `python setup.py build_ext --inplace` (a C compiler and the "
        "Python headers are needed), or set PULLLOG_NO_EXTENSIONS=1 to test without it")
    assert decoding.IMPLEMENTATION == "c"
    assert decoding.decode_records is _crecords.decode_records


# ---------------------------------------------------------------------------- helpers


def both(data: bytes, pos: int, end: int, count: int, base_offset: int = 0, base_timestamp: int = 0,
         timestamp_type: int = 0, log_append_time: int = -1) -> tuple[object, object]:
    """Each decoder's records (as tuples) or the type of the error it raised."""
    results = []
    for decode in (_crecords.decode_records, decoding.py_decode_records):
        try:
            records = decode(ConsumerRecord, data, pos, end, count, base_offset, base_timestamp, timestamp_type,
                             log_append_time, "topic", 7)
        except Exception as exc:  # noqa: BLE001 - the type is what is compared
            results.append(type(exc))
        else:
            assert all(type(r) is ConsumerRecord for r in records)
            results.append([(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                            for r in records])
    return results[0], results[1]


def section(batch: bytes) -> tuple[bytes, int, int, int]:
    """The decompressed records section of a batch: (data, pos, end, count)."""
    header = read_header(batch)
    body = batch[BATCH_HEADER_SIZE:header.size]
    data = decompress(header.compression, body)
    return data, 0, len(data), header.records_count


def raw_record(fields: list[int | bytes | None]) -> bytes:
    """One record from raw parts: ints are varints, bytes are copied, None is a null length."""
    body = bytearray()
    for f in fields:
        if f is None:
            body += encode_varint(-1)
        elif isinstance(f, int):
            body += encode_varint(f)
        else:
            body += f
    return encode_varint(len(body)) + bytes(body)


# ---------------------------------------------------------------------------- well-formed batches

keys = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=200, max_size=20_000))
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=300), st.binary(min_size=16_000, max_size=70_000))
header_lists = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=200))), max_size=4)
# Timestamps in any order: deltas negative and positive, one to ten varint bytes.
timestamps = st.one_of(st.integers(0, 2**42), st.integers(-(2**62), 2**62))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@needs_c
@given(st.lists(st.tuples(keys, values, timestamps, header_lists), min_size=1, max_size=20),
       st.sampled_from(list(Compression)), st.integers(0, 2**62), st.booleans(), st.data())
def test_both_decoders_give_the_same_records(recs, codec, base_offset, log_append, data) -> None:
    gaps = data.draw(st.lists(st.integers(1, 2**20), min_size=len(recs), max_size=len(recs)))
    offset_deltas = [sum(gaps[:i]) for i in range(len(recs))]  # compaction leaves gaps
    batch = build_batch(recs, compression=codec, offset_deltas=offset_deltas)
    payload, pos, end, count = section(batch)
    header = read_header(batch)
    c, py = both(payload, pos, end, count, base_offset, header.base_timestamp, int(log_append), header.max_timestamp)
    assert c == py
    assert isinstance(c, list) and [r[2] for r in c] == [base_offset + d for d in offset_deltas]
    assert [r[5:] for r in c] == [(k, v, tuple(h)) for k, v, _, h in recs]


@needs_c
def test_records_in_the_middle_of_a_buffer_are_read_from_pos_to_end() -> None:
    batch = build_batch([(b"k", b"v"), (None, b"w", 5, [("h", None)])])
    payload, _, end, count = section(batch)
    padded = b"\xff" * 11 + payload + b"\x00" * 5
    c, py = both(padded, 11, 11 + end, count, 100, 1)
    assert c == py and [r[2] for r in c] == [100, 101]


@needs_c
@pytest.mark.parametrize("base, delta", [(2**63 - 1, 1), (-(2**63), -1), (2**63 - 1, 2**63 - 1), (0, -(2**63))])
def test_offsets_and_timestamps_past_int64_are_the_exact_python_sums(base: int, delta: int) -> None:
    record = raw_record([0, delta, delta, None, 0, 0])  # attributes, deltas, no key, an empty value, no headers
    c, py = both(record, 0, len(record), 1, base, base)
    assert c == py
    assert isinstance(c, list) and c[0][2] == base + delta and c[0][3] == base + delta


@needs_c
def test_log_append_time_is_every_records_timestamp() -> None:
    payload, pos, end, count = section(build_batch([(None, b"a", 1), (None, b"b", 2)]))
    c, py = both(payload, pos, end, count, 0, 1, 1, 999)
    assert c == py and [(r[3], r[4]) for r in c] == [(999, 1), (999, 1)]


# ---------------------------------------------------------------------------- damaged batches


@needs_c
@pytest.mark.parametrize("record", [
    raw_record([0, 0, 0, None, None, -1]),                    # a negative number of headers
    raw_record([0, 0, 0, None, None, 1, None, None]),        # a null header key
    raw_record([0, 0, 0, None, None, 5, 0, None]),           # more headers than bytes
    raw_record([0, 0, 0, 50, b"short", None, 0]),            # a key longer than its record
    raw_record([0, 0, 0, None, None, 0]) + b"\x00",          # a byte left over
    raw_record([0, 0, 0, None, None, 0])[:-1],               # a record cut short
    encode_varint(-3) + b"\x00" * 8,                         # a negative record length
    encode_varint(2**40) + b"\x00" * 8,                      # a record length past the end
    raw_record([0, b"\x80" * 10 + b"\x00", 0, None, None, 0]),  # an 11-byte varint
    raw_record([0, b"\xff" * 9 + b"\x02", 0, None, None, 0]),   # a 10-byte varint beyond 64 bits
    b"",                                                     # nothing at all
])
def test_damage_is_the_same_error_from_both(record: bytes) -> None:
    c, py = both(record, 0, len(record), 1)
    assert c == py == CorruptRecordError


@needs_c
def test_a_record_count_the_bytes_cannot_hold_is_corrupt() -> None:
    payload, pos, end, _ = section(build_batch([(None, b"x")]))
    assert both(payload, pos, end, 2**31 - 1) == (CorruptRecordError, CorruptRecordError)
    assert both(payload, pos, end, 0) == (CorruptRecordError, CorruptRecordError)  # bytes left over
    assert both(b"", 0, 0, -5) == ([], [])  # as range(-5): no records, no bytes


@needs_c
def test_bounds_outside_the_buffer_are_refused_not_read() -> None:
    payload, _, end, count = section(build_batch([(None, b"x")]))
    for pos, stop in ((0, end + 1), (-1, end), (5, 4)):
        with pytest.raises(CorruptRecordError):
            _crecords.decode_records(ConsumerRecord, payload, pos, stop, count, 0, 0, 0, 0, "t", 0)


@settings(max_examples=1500, deadline=None)
@needs_c
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=40),
                          st.integers(0, 2**40), header_lists), min_size=1, max_size=5),
       st.data())
def test_damaged_bytes_give_the_same_result_from_both_and_never_crash(recs, data) -> None:
    payload, pos, end, count = section(build_batch(recs))
    damaged = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        if not damaged:
            break
        at = data.draw(st.integers(0, len(damaged) - 1))
        if kind == "flip":
            damaged[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set":
            damaged[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del damaged[at:at + data.draw(st.integers(1, 8))]
        else:
            damaged[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    assume(bytes(damaged) != payload)
    count += data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    c, py = both(bytes(damaged), 0, len(damaged), count, 10, 1000)
    assert c == py


@settings(max_examples=500, deadline=None)
@needs_c
@given(st.binary(max_size=64), st.integers(-2, 6))
def test_random_bytes_give_the_same_result_from_both(junk: bytes, count: int) -> None:
    c, py = both(junk, 0, len(junk), count)
    assert c == py


@needs_c
def test_a_record_type_without_the_slots_is_a_type_error_not_a_crash() -> None:
    payload, pos, end, count = section(build_batch([(None, b"x")]))

    class NoSlots:
        topic = partition = offset = timestamp = timestamp_type = key = value = headers = None

    with pytest.raises(TypeError, match="not a slot"):
        _crecords.decode_records(NoSlots, payload, pos, end, count, 0, 0, 0, 0, "t", 0)
    with pytest.raises(AttributeError):
        _crecords.decode_records(int, payload, pos, end, count, 0, 0, 0, 0, "t", 0)
    # and the real type still works after those
    assert _crecords.decode_records(ConsumerRecord, payload, pos, end, count, 0, 0, 0, 0, "t", 0)[0].value == b"x"


def test_decoded_records_are_ordinary_consumer_records() -> None:
    payload, pos, end, count = section(build_batch([(b"k", b"v", 5, [("h", b"1")])]))
    (record,) = decoding.decode_records(ConsumerRecord, payload, pos, end, count, 3, 5, 0, 0, "t", 2)
    assert record == ConsumerRecord("t", 2, 3, 5, 0, b"k", b"v", (("h", b"1"),))
    assert hash(record) == hash(ConsumerRecord("t", 2, 3, 5, 0, b"k", b"v", (("h", b"1"),)))
    with pytest.raises(AttributeError):
        record.offset = 4  # type: ignore[misc]  # still frozen


def test_a_varint_beyond_64_bits_is_refused() -> None:
    from pulllog.records.varint import VarintError, decode_varint

    assert decode_varint(b"\xff" * 9 + b"\x01", 0) == (-(2**63), 10)  # 64 bits: fine
    with pytest.raises(VarintError, match="64 bits"):
        decode_varint(b"\xff" * 9 + b"\x02", 0)


@needs_c
def test_a_field_that_is_not_a_plain_slot_is_set_through_its_descriptor() -> None:
    class Custom:
        __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "_value", "headers")

        @property
        def value(self) -> bytes | None:
            return self._value

        @value.setter
        def value(self, v: bytes | None) -> None:
            self._value = None if v is None else v.upper()

    payload, pos, end, count = section(build_batch([(b"k", b"abc"), (None, None)]))
    for decode in (_crecords.decode_records, decoding.py_decode_records):
        records = decode(Custom, payload, pos, end, count, 0, 0, 0, 0, "t", 0)
        assert [(r.offset, r.key, r.value) for r in records] == [(0, b"k", b"ABC"), (1, None, None)]
