"""The C record encoder (pulllog.records._crecords) against the pure-Python one: the same bytes
for every record and message set, sealed with every codec, and the same refusal of a bad one.

As for the decoder, the C extension is optional for a user but not for a test run: where it
was not built, ``test_the_c_encoder_is_built`` fails. With PULLLOG_NO_EXTENSIONS=1 the producer
uses the pure-Python encoder (the comparisons still call the C one directly where it is built).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.client import accumulator
from pulllog.client.accumulator import ProducerBatch, encode_headers
from pulllog.client.types import ConsumerRecord
from pulllog.records import encoding
from pulllog.records.batch import BATCH_HEADER_SIZE, read_header
from pulllog.records.compression import Compression, decompress
from pulllog.records.decoding import py_decode_records
from pulllog.records.extensions import extensions_disabled

NO_EXTENSIONS = extensions_disabled()

try:
    from pulllog.records import _crecords
    c_append_record = _crecords.append_record
    c_append_values = _crecords.append_values
except (ImportError, AttributeError):
    _crecords = None  # type: ignore[assignment]

needs_c = pytest.mark.skipif(_crecords is None, reason="the C encoder is not built (test_the_c_encoder_is_built says so)")

BASE_TS = 1_700_000_000_000


def test_the_c_encoder_is_built() -> None:
    if NO_EXTENSIONS:
        assert encoding.IMPLEMENTATION == "python"
        assert encoding.append_values is None
    else:
        assert _crecords is not None, "run `python setup.py build_ext --inplace` (or PULLLOG_NO_EXTENSIONS=1)"
        assert encoding.IMPLEMENTATION == "c"


# ------------------------------------------------------------------ one record

blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=100, max_size=300))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
deltas = st.one_of(st.integers(0, 200), st.integers(-(2**63), 2**63 - 1))


@needs_c
@settings(max_examples=300, deadline=None)
@given(prefix=st.binary(max_size=10), od=st.integers(0, 2**31 - 1), td=deltas, key=blobs, value=blobs,
       headers=header_lists)
def test_append_record_matches_python(prefix: bytes, od: int, td: int, key: bytes | None, value: bytes | None,
                                      headers: list[tuple[str, bytes | None]]) -> None:
    hdrs = encode_headers(headers)
    by_c, by_python = bytearray(prefix), bytearray(prefix)
    c_append_record(by_c, od, td, key, value, hdrs)
    encoding.py_append_record(by_python, od, td, key, value, hdrs)
    assert by_c == by_python


@needs_c
def test_append_record_takes_any_bytes_like_key_and_value() -> None:
    by_c, by_python = bytearray(), bytearray()
    for key, value in [(bytearray(b"k"), memoryview(b"value")), (b"", b""), (memoryview(b"kk"), None)]:
        c_append_record(by_c, 1, 2, key, value, b"\x00")
        encoding.py_append_record(by_python, 1, 2, key, value, b"\x00")
    assert by_c == by_python


@pytest.mark.parametrize("key, value", [("text key", b"v"), (None, "text value"), (b"k", 12), (3, None)])
@pytest.mark.parametrize("implementation", ["c", "python"])
def test_a_bad_key_or_value_leaves_the_records_as_they_were(implementation: str, key: Any, value: Any) -> None:
    if implementation == "c" and _crecords is None:
        pytest.skip("the C encoder is not built (test_the_c_encoder_is_built says so)")
    append = c_append_record if implementation == "c" else encoding.py_append_record
    records = bytearray(b"earlier records")
    with pytest.raises(TypeError):
        append(records, 0, 0, key, value, b"\x00")
    assert records == b"earlier records"


# ------------------------------------------------------------------ whole batches, both paths

def _random_item(rng: random.Random) -> Any:
    def blob() -> bytes | None:
        return rng.choice([None, b"", rng.randbytes(rng.randint(1, 30)), rng.randbytes(rng.randint(120, 300))])
    form = rng.randrange(6)
    if form == 0:
        return blob()
    if form == 1:
        return (blob(), blob())
    if form == 2:
        return (blob(), blob(), None)
    if form == 3:
        return (blob(), blob(), None, None)
    headers = [(f"h{i}", blob()) for i in range(rng.randint(0, 2))]
    if form == 4:
        return (blob(), blob(), headers)
    return (blob(), blob(), headers, BASE_TS + rng.randint(-5, 5000))


def _build(rng: random.Random, codec: Compression) -> bytes:
    loop = asyncio.new_event_loop()
    try:
        batch = ProducerBatch("t", 0, BASE_TS, 0.0, loop)
        for _ in range(rng.randint(1, 12)):
            ts = BASE_TS + rng.randint(-3, 20_000)
            if rng.random() < 0.5:
                item = _random_item(rng)
                key, value = (item[0], item[1]) if isinstance(item, tuple) else (None, item)
                headers = encode_headers(item[2]) if isinstance(item, tuple) and len(item) > 2 else b"\x00"
                batch.append(key, value, headers, ts)
            else:
                simple = rng.random() < 0.5  # all plain values: the C encoder's one-call path
                items = [rng.randbytes(rng.randint(0, 250)) if simple else _random_item(rng)
                         for _ in range(rng.randint(0, 60))]
                batch.extend(items, ts, None)
        return batch.seal(codec, 7, 1, 42)
    finally:
        loop.close()


@needs_c
@pytest.mark.parametrize("codec", list(Compression))
def test_batches_are_the_same_bytes_from_c_and_python(codec: Compression, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(40):
        by_c = _build(random.Random(seed), codec)
        with monkeypatch.context() as m:
            m.setattr(accumulator.ProducerBatch, "builder", encoding.PyRecordsBuilder)
            by_python = _build(random.Random(seed), codec)
        assert by_c == by_python, f"seed {seed}"


@pytest.mark.parametrize("codec", list(Compression))
def test_batches_decode_to_what_was_sent(codec: Compression) -> None:
    """The encoder in use (C or Python) against the decoder, record for record."""
    loop = asyncio.new_event_loop()
    try:
        rng = random.Random(codec)
        batch = ProducerBatch("t", 0, BASE_TS, 0.0, loop)
        sent: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]] = []
        for _ in range(20):
            items = [_random_item(rng) for _ in range(rng.randint(0, 30))]
            batch.extend(items, BASE_TS + 1, None)
            for item in items:
                if not isinstance(item, tuple):
                    sent.append((None, item, (), BASE_TS + 1))
                    continue
                headers = tuple(item[2]) if len(item) > 2 and item[2] else ()
                ts = item[3] if len(item) > 3 and item[3] is not None else BASE_TS + 1
                sent.append((item[0], item[1], headers, ts))
            batch.append(b"key", b"value", b"\x00", BASE_TS + 2)
            sent.append((b"key", b"value", (), BASE_TS + 2))
        wire = batch.seal(codec, -1, -1, -1)
    finally:
        loop.close()
    header = read_header(wire, 0)
    records = decompress(codec, wire[BATCH_HEADER_SIZE:])
    decoded = py_decode_records(ConsumerRecord, records, 0, len(records), header.records_count, 0,
                                header.base_timestamp, 0, -1, "t", 0)
    assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in decoded] == sent
    assert header.max_timestamp == max(s[3] for s in sent)


# ------------------------------------------------------------------ RecordsBuilder: C and Python twins

def _builders() -> list[type[Any]]:
    return [encoding.PyRecordsBuilder] + ([_crecords.RecordsBuilder] if _crecords is not None else [])


def _fill(builder_type: type[Any], rng: random.Random) -> tuple[Any, list[int]]:
    """A builder filled by a random mix of the three ways in, and what each call returned."""
    builder = builder_type(BASE_TS)
    returned: list[int] = []
    for _ in range(rng.randint(1, 40)):
        way = rng.randrange(4)
        ts = BASE_TS + rng.randint(-1000, 1000)
        if way == 0:  # a record, unconditionally
            item = _random_item(rng)
            key, value = (item[0], item[1]) if isinstance(item, tuple) else (None, item)
            headers = encode_headers(item[2]) if isinstance(item, tuple) and len(item) > 2 else b"\x00"
            returned.append(builder.add_record(key, value, headers, ts))
        elif way == 1:  # a record if there is room: the accumulator's per-record call
            value = rng.randbytes(rng.randint(0, 300))
            returned.append(builder.add_record(None, value, b"\x00", ts, len(value) + 24, rng.randint(0, 3000)))
        elif way == 2:  # a message set of plain values; where -1 (Python), encoded as its caller does
            values = [rng.randbytes(rng.randint(0, 50)) for _ in range(rng.randint(0, 5))]
            n = builder.add_values(values, ts)
            if n == -1:
                data = bytearray()
                for i, value in enumerate(values):
                    encoding.py_append_record(data, builder.records_count + i, ts - BASE_TS, None, value, b"\x00")
                builder.add_encoded(bytes(data), len(values), ts)
                n = len(values)
            returned.append(n)
        else:  # records encoded elsewhere
            data = bytearray()
            n = rng.randint(0, 3)
            for i in range(n):
                encoding.py_append_record(data, builder.records_count + i, ts - BASE_TS, None, b"x", b"\x00")
            builder.add_encoded(bytes(data), n, ts)
            returned.append(n)
    return builder, returned


@needs_c
def test_the_c_and_python_records_builders_agree() -> None:
    """Byte for byte, count and max timestamp, and which records found no room (-1)."""
    for seed in range(300):
        c_builder, c_returned = _fill(_crecords.RecordsBuilder, random.Random(seed))
        py_builder, py_returned = _fill(encoding.PyRecordsBuilder, random.Random(seed))
        assert bytes(c_builder) == bytes(py_builder), f"seed {seed}"
        assert c_returned == py_returned, f"seed {seed}"
        assert (c_builder.records_count, c_builder.max_timestamp) == (py_builder.records_count, py_builder.max_timestamp)


@needs_c
def test_the_c_and_python_builders_seal_the_same_batch() -> None:
    """seal(): the same bytes from both, a batch that reads back with its CRC checked and the
    producer fields given (none, an idempotent producer's, the extremes of each field)."""
    from pulllog.records.batch import RecordBatch
    from pulllog.records.crc import crc32c

    producers = [(0, -1, -1, -1), (0x10, 4_000_000_000, 3, 17), (0x10, 2**63 - 1, 2**15 - 1, 2**31 - 1),
                 (0, -(2**63), -(2**15), -(2**31))]
    for seed in range(200):
        attributes, producer_id, epoch, sequence = producers[seed % len(producers)]
        c_builder, _ = _fill(_crecords.RecordsBuilder, random.Random(seed))
        py_builder, _ = _fill(encoding.PyRecordsBuilder, random.Random(seed))
        if c_builder.records_count == 0:
            continue
        wire = c_builder.seal(attributes, producer_id, epoch, sequence, crc32c)
        assert wire == py_builder.seal(attributes, producer_id, epoch, sequence, crc32c), f"seed {seed}"
        batch = RecordBatch.from_bytes(wire)  # checks the CRC
        header = batch.header
        assert (header.attributes, header.producer_id, header.producer_epoch, header.base_sequence) == (
            attributes, producer_id, epoch, sequence)
        assert (header.records_count, header.base_timestamp, header.max_timestamp) == (
            c_builder.records_count, BASE_TS, c_builder.max_timestamp)
        assert (header.base_offset, header.partition_leader_epoch) == (0, -1)
        assert wire[61:] == bytes(c_builder)


@pytest.mark.parametrize("builder_type", _builders(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_sealing_an_empty_builder_is_refused(builder_type: type[Any]) -> None:
    from pulllog.records.crc import crc32c

    with pytest.raises(ValueError):
        builder_type(BASE_TS).seal(0, -1, -1, -1, crc32c)


@pytest.mark.parametrize("builder_type", _builders(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_a_records_builder_is_a_bytearray_with_its_counters(builder_type: type[Any]) -> None:
    builder = builder_type(BASE_TS)
    assert (builder.records_count, builder.base_timestamp, builder.max_timestamp, len(builder)) == (0, BASE_TS, BASE_TS, 0)
    assert builder.add_record(None, b"v" * 10, b"\x00", BASE_TS + 7) == 0
    assert builder.add_record(b"k", None, encode_headers([("h", None)]), BASE_TS - 3) == 1
    assert (builder.records_count, builder.max_timestamp) == (2, BASE_TS + 7)
    expected = bytearray()
    encoding.py_append_record(expected, 0, 7, None, b"v" * 10, b"\x00")
    encoding.py_append_record(expected, 1, -3, b"k", None, encode_headers([("h", None)]))
    assert bytes(builder) == bytes(expected) and len(builder) == len(expected)
    assert bytes(memoryview(builder)) == bytes(expected)
    # no room: len + reserved > room, nothing appended
    assert builder.add_record(None, b"x", b"\x00", BASE_TS + 99, 10, len(builder) + 9) == -1
    assert builder.records_count == 2 and bytes(builder) == bytes(expected) and builder.max_timestamp == BASE_TS + 7
    assert builder.add_record(None, b"x", b"\x00", BASE_TS, 10, len(builder) + 10) == 2
    with pytest.raises(TypeError):
        builder.add_record("text", b"x", b"\x00", BASE_TS)
    assert builder.records_count == 3


def _told(result: Any, delta: int, timestamp: int) -> tuple[Any, int, int]:
    return result, delta, timestamp


@pytest.mark.parametrize("builder_type", _builders(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("call", [
    ((BASE_TS,), {}), ((-2**63,), {}), ((2**63 - 1,), {}), ((BASE_TS, "result"), {}),
    ((BASE_TS, "result", _told), {}), ((), {"base_timestamp": BASE_TS, "make_future": _told}),
    ((BASE_TS,), {"result": "result"}), ((True,), {}),
], ids=["ts", "min", "max", "result", "make-future", "keywords", "mixed", "bool"])
def test_a_records_builder_starts_empty_however_it_is_called(builder_type: type[Any], call: Any) -> None:
    """The C builder's call without the argument parser (positional, an int) makes what the
    generic call makes: empty, at its base timestamp, with its result and make_future."""
    args, kwargs = call
    builder = builder_type(*args, **kwargs)
    ts = args[0] if args else kwargs["base_timestamp"]
    assert (builder.records_count, builder.base_timestamp, builder.max_timestamp, len(builder), builder.reserved) == (
        0, ts, ts, 0, 0)
    result = args[1] if len(args) > 1 else kwargs.get("result")
    assert builder.result == result
    if len(args) > 2 or "make_future" in kwargs:
        assert builder.add(None, b"v", b"\x00", ts, 7, 100) == (result, 0, ts)
        assert builder.reserved == 7
    else:
        assert builder.add_record(None, b"v", b"\x00", ts) == 0
    assert builder.records_count == 1


@needs_c
@pytest.mark.parametrize("call, error", [
    (((2**63,), {}), OverflowError), (((-2**63 - 1,), {}), OverflowError), (((1.5,), {}), TypeError),
    ((("1",), {}), TypeError), (((), {}), TypeError), (((1, 2, 3, 4), {}), TypeError),
    (((1,), {"other": 2}), TypeError), (((1,), {"base_timestamp": 2}), TypeError),
])
def test_a_c_records_builder_refuses_what_its_argument_parser_refuses(call: Any, error: type[Exception]) -> None:
    args, kwargs = call
    with pytest.raises(error):
        _crecords.RecordsBuilder(*args, **kwargs)


@pytest.mark.parametrize("builder_type", _builders(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_an_empty_builder_takes_a_record_however_large(builder_type: type[Any]) -> None:
    """The first record of a batch always goes in: a record larger than batch_size gets a batch."""
    builder = builder_type(BASE_TS)
    assert builder.add_record(None, b"x" * 1000, b"\x00", BASE_TS, 1024, 10) == 0
    assert builder.records_count == 1


# ------------------------------------------------------------------ SlotsMaker: send()'s RecordFuture

@needs_c
def test_the_slots_maker_makes_what_record_future_init_makes() -> None:
    from pulllog.client.record_future import ProduceResult, RecordFuture

    loop = asyncio.new_event_loop()
    try:
        result = ProduceResult("t", 3, loop)
        make = _crecords.SlotsMaker(RecordFuture(None, 0, 0), ("_result", "relative_offset", "_timestamp"))  # type: ignore[arg-type]
        made, built = make(result, 17, BASE_TS), RecordFuture(result, 17, BASE_TS)
        assert type(made) is RecordFuture
        assert [getattr(made, name) for name in RecordFuture.__slots__] == [
            getattr(built, name) for name in RecordFuture.__slots__]
        assert accumulator.new_record_future is not RecordFuture or NO_EXTENSIONS
        result.set_acknowledged(100, -1)
        assert made.result().offset == 117 and made.result().timestamp == BASE_TS
    finally:
        loop.close()


@needs_c
def test_the_slots_maker_refuses_what_it_cannot_copy() -> None:
    class WithDict:
        pass

    class Slotted:
        __slots__ = ("a", "b")

    with pytest.raises(TypeError):
        _crecords.SlotsMaker(WithDict(), ("a",))
    slotted = Slotted()
    slotted.a, slotted.b = 1, 2
    with pytest.raises(TypeError):
        _crecords.SlotsMaker(slotted, ("c",))
    make = _crecords.SlotsMaker(slotted, ("b",))
    copy = make(5)
    assert (copy.a, copy.b) == (1, 5)
    with pytest.raises(TypeError):
        make(1, 2)


@needs_c
def test_a_sets_buffer_estimate_is_the_same_from_c_and_python(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(17)
    for _ in range(300):
        items = [_random_item(rng) for _ in range(rng.randint(0, 20))]
        by_c = accumulator.estimate_set_size(items)
        with monkeypatch.context() as m:
            m.setattr(accumulator, "values_size", None)
            assert accumulator.estimate_set_size(items) == by_c
    assert _crecords.values_size([b"ab", None, (b"k", b"vv"), (None, b"v", None), (b"k", None, None, None)]) == 9
    assert _crecords.values_size([b"ab", bytearray(b"x")]) == -1  # not simple: the Python loop counts it


# ------------------------------------------------------------------ ready: send()'s awaitable

def _readies() -> list[Any]:
    return [encoding.py_ready] + ([_crecords.Ready] if not NO_EXTENSIONS else [])


@pytest.mark.parametrize("make", _readies(), ids=lambda f: f.__module__.rsplit(".", 1)[-1])
def test_ready_gives_its_value_as_an_async_def_returning_it_would(make: Any) -> None:
    """Awaited, by asyncio's helpers, and under a tracing interpreter (coverage, debuggers:
    the C type's tp_iternext instead of am_send); a tuple stays one value."""
    import sys

    async def main() -> list[Any]:
        got = [await make(value) for value in (7, None, (1, 2), ())]
        got += await asyncio.gather(make("a"), make(("b",)))
        got.append(await asyncio.wait_for(make(3.5), 5))
        task_result = await asyncio.ensure_future(make([1]))
        got.append(task_result)
        assert asyncio.iscoroutine(make(0))  # what `async def send()` returned
        got.append(await asyncio.create_task(make("t")))
        cancelled = asyncio.create_task(make("c"))
        cancelled.cancel()  # before its first step: throw(CancelledError) reaches it
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return got

    expected = [7, None, (1, 2), (), "a", ("b",), 3.5, [1], "t"]
    assert asyncio.run(main()) == expected
    previous = sys.gettrace()
    sys.settrace(lambda *_args: None)
    try:
        assert asyncio.run(main()) == expected
    finally:
        sys.settrace(previous)


@needs_c
def test_ready_in_c_may_be_awaited_again_and_refuses_bad_arguments() -> None:
    async def twice() -> tuple[Any, Any]:
        r = _crecords.Ready("v")
        return await r, await r

    assert asyncio.run(twice()) == ("v", "v")
    assert encoding.ready is _crecords.Ready or NO_EXTENSIONS
    with pytest.raises(TypeError):
        _crecords.Ready()
    with pytest.raises(TypeError):
        _crecords.Ready(1, 2)
    with pytest.raises(TypeError):
        _crecords.Ready(value=1)


def test_now_ms_reads_the_clock_time_time_ns_reads() -> None:
    """send()'s default timestamp: the C clock read between two of Python's, in ms."""
    for _ in range(1000):
        before = encoding.py_now_ms()
        now = encoding.now_ms()
        assert before <= now <= encoding.py_now_ms()


@pytest.mark.parametrize("builder_type", _builders(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_add_is_add_record_then_the_memory_held_and_the_future_made(builder_type: type[Any]) -> None:
    made: list[tuple[Any, int, int]] = []

    def make_future(result: Any, delta: int, timestamp: int) -> str:
        made.append((result, delta, timestamp))
        return f"future {delta}"

    builder = builder_type(BASE_TS, "the result", make_future)
    assert builder.add(None, b"v" * 10, b"\x00", BASE_TS + 1, 35, -1) == "future 0"
    assert builder.add(b"k", b"v", b"\x00", BASE_TS + 2, 28, 10_000) == "future 1"
    assert (builder.records_count, builder.reserved, builder.max_timestamp) == (2, 63, BASE_TS + 2)
    assert builder.add(None, b"v", b"\x00", BASE_TS + 3, 25, len(builder) + 24) is None  # no room
    assert (builder.records_count, builder.reserved, builder.max_timestamp) == (2, 63, BASE_TS + 2)
    assert made == [("the result", 0, BASE_TS + 1), ("the result", 1, BASE_TS + 2)]
    expected = bytearray()
    encoding.py_append_record(expected, 0, 1, None, b"v" * 10, b"\x00")
    encoding.py_append_record(expected, 1, 2, b"k", b"v", b"\x00")
    assert bytes(builder) == bytes(expected)
    with pytest.raises(TypeError):
        builder.add(None, 12, b"\x00", BASE_TS, 25, -1)
    assert (builder.records_count, builder.reserved, len(made)) == (2, 63, 2)
