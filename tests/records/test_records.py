"""RecordBatch v2: round trips, and byte compatibility with independent implementations."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.records.compression import Compression
from pulllog.records.batch import (
    CorruptRecordError,
    RecordBatch,
    TimestampType,
    UnsupportedMagicError,
    build_batch,
    decode_varint,
    encode_varint,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    validate_batch,
)

CODECS = list(Compression)

keys = st.one_of(st.none(), st.binary(max_size=64))
values = st.one_of(st.none(), st.binary(max_size=512))
headers = st.lists(
    st.tuples(st.text(max_size=16), st.one_of(st.none(), st.binary(max_size=32))), max_size=3
)
records = st.lists(
    st.tuples(keys, values, st.integers(0, 2**41), headers), min_size=1, max_size=20
)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n: int) -> None:
    encoded = encode_varint(n)
    assert decode_varint(encoded, 0) == (n, len(encoded))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_matches_kafka_python(n: int) -> None:
    from kafka.record.util import encode_varint as kp_encode

    out = bytearray()
    kp_encode(n, out.append)
    assert encode_varint(n) == bytes(out)


@settings(max_examples=150, deadline=None)
@given(records, st.sampled_from(CODECS), st.integers(0, 2**40))
def test_batch_round_trip(recs, codec, base_offset) -> None:
    raw = build_batch(recs, base_offset=base_offset, compression=codec)
    batch = RecordBatch.from_bytes(raw)
    assert batch.header.compression == codec
    assert batch.header.records_count == len(recs)
    assert batch.last_offset == base_offset + len(recs) - 1
    decoded = batch.records()
    for i, ((key, value, ts, hdrs), rec) in enumerate(zip(recs, decoded, strict=True)):
        assert rec.offset == base_offset + i
        assert (rec.key, rec.value, rec.timestamp) == (key, value, ts)
        assert list(rec.headers) == [(k, v) for k, v in hdrs]
    assert batch.header.max_timestamp == max(r[2] for r in recs)


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    raw = bytearray(build_batch([(b"k", b"v")]))
    set_base_offset(raw, 0, 123456789)
    struct.pack_into(">i", raw, 12, 7)
    header = validate_batch(raw)
    assert header.base_offset == 123456789
    assert header.partition_leader_epoch == 7


def test_flipped_byte_fails_the_crc() -> None:
    raw = bytearray(build_batch([(b"k", b"value" * 10)]))
    raw[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(raw)


def test_log_append_time_keeps_the_batch_valid() -> None:
    raw = bytearray(build_batch([(b"k", b"v", 1000)]))
    set_log_append_time(raw, 0, 5555)
    header = validate_batch(raw)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5555


def test_iter_batches_stops_at_a_partial_batch() -> None:
    a, b = build_batch([(b"a", b"1")]), build_batch([(b"b", b"2")], base_offset=1)
    data = a + b[:-5]
    assert [h.base_offset for _, h in iter_batches(data)] == [0]


def test_magic_1_message_set_is_rejected_with_a_clear_error() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1000, key=b"k", value=b"v")
    with pytest.raises(UnsupportedMagicError, match="not supported"):
        validate_batch(bytes(builder.build()))


def test_magic_0_message_set_is_rejected_with_a_clear_error() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=b"k", value=b"v")
    with pytest.raises(UnsupportedMagicError):
        validate_batch(bytes(builder.build()))


# ---------------------------------------------------------------- oracles, both directions

ORACLE_RECORDS = [
    (b"key-%d" % i, (b"value %d " % i) * (1 + i % 40), 1_700_000_000_000 + i, [("h", b"x%d" % i)])
    for i in range(300)
] + [(None, b"no key", 1_700_000_000_500, []), (b"tombstone", None, 1_700_000_000_501, [])]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    raw = build_batch(ORACLE_RECORDS, base_offset=1000, compression=codec,
                      producer_id=7, producer_epoch=1, base_sequence=0)
    theirs = DefaultRecordBatch(bytearray(raw))
    assert theirs.validate_crc()
    assert theirs.compression_type == int(codec)
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in theirs]
    want = [(1000 + i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(ORACLE_RECORDS)]
    assert got == want


def _kafka_python_batch(codec: Compression) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=0,
                                        producer_id=9, producer_epoch=2, base_sequence=5,
                                        batch_size=1 << 24)
    for i, (k, v, ts, h) in enumerate(ORACLE_RECORDS):
        assert builder.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    return bytes(builder.build())


def _aiokafka_batch(codec: Compression) -> bytes:
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    builder = _DefaultRecordBatchBuilderPy(magic=2, compression_type=int(codec), is_transactional=0,
                                           producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                           batch_size=1 << 24)
    for i, (k, v, ts, h) in enumerate(ORACLE_RECORDS):
        assert builder.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("builder", [_kafka_python_batch, _aiokafka_batch], ids=["kafka-python", "aiokafka"])
def test_we_read_batches_built_by_other_clients(builder, codec: Compression) -> None:
    raw = builder(codec)
    batch = RecordBatch.from_bytes(raw)  # validates the CRC
    assert batch.header.compression == codec
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch.records()]
    want = [(i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(ORACLE_RECORDS)]
    assert got == want


def test_snappy_raw_payload_without_xerial_framing_is_read() -> None:
    """librdkafka sends raw snappy; Java sends xerial framing. Both must decode."""
    import cramjam

    from pulllog.records.compression import decompress

    data = b"hello snappy " * 1000
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_a_rebuilt_batch_keeps_its_header() -> None:
    from pulllog.records.batch import rebuild_batch

    raw = build_batch(
        [(b"a", b"1", 1_000), (b"b", b"2", 1_005), (b"c", b"3", 1_009)],
        base_offset=40, producer_id=7, producer_epoch=2, base_sequence=11,
        partition_leader_epoch=3, transactional=True, timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    raw = bytearray(raw)
    set_log_append_time(raw, 0, 5_000)
    batch = RecordBatch.from_bytes(raw)
    first, _, last = batch.records()

    kept = RecordBatch.from_bytes(rebuild_batch(batch.header, [first, last], compression=Compression.GZIP))
    same = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence",
            "partition_leader_epoch", "is_transactional", "timestamp_type", "max_timestamp")
    assert {f: getattr(kept.header, f) for f in same} == {f: getattr(batch.header, f) for f in same}
    assert kept.header.compression is Compression.GZIP
    assert [(r.offset, r.key) for r in kept.records()] == [(40, b"a"), (42, b"c")]

    empty = RecordBatch.from_bytes(rebuild_batch(batch.header, []))  # Kafka's writeEmptyHeader
    assert (empty.header.records_count, empty.header.compression) == (0, Compression.NONE)
    assert empty.header.base_timestamp == empty.header.max_timestamp == 5_000
    assert (empty.header.base_offset, empty.header.last_offset) == (40, 42)


def test_a_rebuilt_marker_stays_a_control_batch() -> None:
    # The cleaner rebuilds a transaction marker to stamp its delete horizon (KIP-534).
    from pulllog.records.batch import rebuild_batch
    from pulllog.records.control import (
        ControlType,
        build_control_batch,
        read_control_record,
    )

    marker = RecordBatch.from_bytes(build_control_batch(9, 4, False, 2, 1_000, base_offset=77))
    rebuilt = RecordBatch.from_bytes(rebuild_batch(marker.header, marker.records(), delete_horizon_ms=9_000))
    assert (rebuilt.header.is_control, rebuilt.header.is_transactional) == (True, True)
    assert (rebuilt.header.producer_id, rebuilt.header.producer_epoch, rebuilt.base_offset) == (9, 4, 77)
    assert rebuilt.header.delete_horizon_ms == 9_000
    control = read_control_record(rebuilt)
    assert control is not None and control.type == ControlType.ABORT
