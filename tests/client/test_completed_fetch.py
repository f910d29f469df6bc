"""The consumer's decoder, with no broker: bytes in, ConsumerRecords out.

Transactions are not in the broker yet, so the read_committed rules (aborted transactions
listed in a Fetch response) are shown here on hand-built logs, as Kafka's own
``CompletedFetchTest`` does.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.client import completed_fetch
from pulllog.client.completed_fetch import CompletedFetch, CorruptRecordError
from pulllog.client.types import ConsumerRecord, TopicPartition
from pulllog.records import decoding
from pulllog.records.compression import Compression
from pulllog.records.batch import RecordBatch, TimestampType, build_batch
from pulllog.records.control import ControlType, build_control_batch

TP = TopicPartition("t", 3)


@pytest.fixture(autouse=True, params=["built", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with the decoder in use (C where built) and with the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(completed_fetch, "decode_records", decoding.py_decode_records)


def log_of(*batches: bytes) -> bytes:
    """Concatenate batches, giving them consecutive offsets from 0 as the broker would."""
    out = bytearray()
    offset = 0
    for raw in batches:
        batch = bytearray(raw)
        batch[0:8] = offset.to_bytes(8, "big", signed=True)
        out += batch
        offset += RecordBatch.from_bytes(bytes(batch)).header.last_offset_delta + 1
    return bytes(out)


def read_all(fetch: CompletedFetch) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    while not fetch.drained:
        out.extend(fetch.take(1000))
    return out


def txn(producer_id: int, *values: bytes) -> bytes:
    return build_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=0, base_sequence=0,
                       transactional=True)


def marker(producer_id: int, kind: ControlType) -> bytes:
    return build_control_batch(producer_id, 0, kind == ControlType.COMMIT, 0, 0)


def plain(*values: bytes) -> bytes:
    return build_batch([(None, v) for v in values])


# ---------------------------------------------------------------------------- decoding

keys = st.one_of(st.none(), st.binary(max_size=300))
values = st.one_of(st.none(), st.binary(max_size=20_000))
headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=200))), max_size=3)
# Timestamps far apart exercise the 3+ byte varints; negative deltas occur as well.
records = st.lists(st.tuples(keys, values, st.integers(0, 2**42), headers), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(records, st.sampled_from(list(Compression)), st.integers(0, 2**40), st.data())
def test_decoded_records_match_the_log_decoder(recs, codec, base_offset, data) -> None:
    raw = bytearray(build_batch(recs, compression=codec))
    raw[0:8] = base_offset.to_bytes(8, "big")
    fetch_offset = base_offset + data.draw(st.integers(0, len(recs) - 1))
    fetch = CompletedFetch(TP, bytes(raw), fetch_offset)
    got = read_all(fetch)
    want = [r for r in RecordBatch.from_bytes(bytes(raw)).records() if r.offset >= fetch_offset]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == \
           [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in want]
    assert all((r.topic, r.partition, r.timestamp_type) == ("t", 3, 0) for r in got)
    assert fetch.next_offset == base_offset + len(recs)


def test_log_append_time_gives_each_record_the_batch_max_timestamp() -> None:
    raw = build_batch([(None, b"a", 100), (None, b"b", 200)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    got = read_all(CompletedFetch(TP, raw, 0))
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(200, 1), (200, 1)]


def test_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    data = log_of(plain(b"a", b"b"), plain(b"c"))
    fetch = CompletedFetch(TP, data[:-10], 0)
    assert fetch.next_offset == 2
    assert [r.value for r in read_all(fetch)] == [b"a", b"b"]


def test_take_hands_out_records_across_batches_in_pieces() -> None:
    fetch = CompletedFetch(TP, log_of(plain(b"0", b"1", b"2"), plain(b"3", b"4")), 0)
    assert [r.offset for r in fetch.take(2)] == [0, 1]
    assert [r.offset for r in fetch.take(2)] == [2, 3]
    assert [r.offset for r in fetch.take(2)] == [4]
    assert fetch.take(2) == [] and fetch.drained


def test_whole_batches_below_the_fetch_offset_are_skipped() -> None:
    fetch = CompletedFetch(TP, log_of(plain(b"0", b"1"), plain(b"2", b"3")), 3)
    assert [r.offset for r in read_all(fetch)] == [3]


# ---------------------------------------------------------------------------- transactions


def test_read_committed_skips_an_aborted_transaction_and_keeps_the_rest() -> None:
    data = log_of(txn(7, b"aborted-1"), plain(b"plain"), txn(8, b"committed"), txn(7, b"aborted-2"),
                  marker(7, ControlType.ABORT), marker(8, ControlType.COMMIT), txn(7, b"next-txn"))
    fetch = CompletedFetch(TP, data, 0, read_committed=True, aborted_transactions=[(7, 0)])
    assert [(r.offset, r.value) for r in read_all(fetch)] == [(1, b"plain"), (2, b"committed"), (6, b"next-txn")]


def test_read_uncommitted_returns_aborted_data_but_never_markers() -> None:
    data = log_of(txn(7, b"aborted"), marker(7, ControlType.ABORT), plain(b"plain"))
    fetch = CompletedFetch(TP, data, 0, aborted_transactions=[(7, 0)])
    assert [r.value for r in read_all(fetch)] == [b"aborted", b"plain"]
    assert fetch.next_offset == 3


# ---------------------------------------------------------------------------- damage


def test_crc_mismatch_raises_after_the_records_before_it() -> None:
    data = bytearray(log_of(plain(b"good"), plain(b"bad!"), plain(b"unreached")))
    second = len(log_of(plain(b"good")))
    data[second + 70] ^= 0x01
    fetch = CompletedFetch(TP, bytes(data), 0)
    assert [r.value for r in fetch.take(10)] == [b"good"]
    for _ in range(2):  # and it stays raised
        with pytest.raises(CorruptRecordError, match="offsets 1..1 of t-3 failed its CRC-32C check"):
            fetch.take(10)


def test_damaged_batch_length_in_the_first_partition_with_data_is_corruption() -> None:
    data = bytearray(plain(b"x" * 100))
    data[8:12] = (10_000).to_bytes(4, "big")
    fetch = CompletedFetch(TP, bytes(data), 0, must_hold_a_batch=True)
    assert fetch.broken
    with pytest.raises(CorruptRecordError, match="no complete batch"):
        fetch.take(10)


def test_bytes_without_a_whole_batch_in_a_later_partition_are_a_cut_not_damage() -> None:
    fetch = CompletedFetch(TP, plain(b"x" * 100)[:50], 0, must_hold_a_batch=False)
    assert not fetch.has_data and fetch.next_offset is None
