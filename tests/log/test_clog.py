"""The C batch checks (pulllog.log._clog) against Log.validate's Python code: the same batches
and headers for data that is valid, None (so the Python code refuses it with its own error)
for data that is not.

As for the other extensions, the C code is optional for a user but not for a test run: where
it was not built, ``test_the_c_batch_checks_are_built`` fails. With PULLLOG_NO_EXTENSIONS=1
the log uses the Python code alone (the comparisons still call the C function directly).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulllog.log import Log, LogConfig
from pulllog.log import log as log_module
from pulllog.records import InvalidRecordError, build_batch
from pulllog.records.batch import BatchHeader
from pulllog.records.compression import Compression
from pulllog.records.control import build_control_batch
from pulllog.records.crc import crc32c
from pulllog.records.extensions import extensions_disabled

NO_EXTENSIONS = extensions_disabled()

try:
    from pulllog.log import _clog  # type: ignore[attr-defined]
except ImportError:
    _clog = None
else:
    _clog.bind(BatchHeader, crc32c)

needs_c = pytest.mark.skipif(_clog is None, reason="the C checks are not built (test_the_c_batch_checks_are_built says so)")

def test_the_c_batch_checks_are_built() -> None:
    if NO_EXTENSIONS:
        assert log_module._C_VALIDATE is None
    else:
        assert _clog is not None, "run `python setup.py build_ext --inplace` (or PULLLOG_NO_EXTENSIONS=1)"
        assert log_module._C_VALIDATE is _clog.validate


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Any:
    partition = Log.open(tmp_path_factory.mktemp("clog") / "t-0", LogConfig.from_kafka({}))
    yield partition
    partition.close()


def python_validate(log: Log, data: Any) -> Any:
    """Log.validate without the C code: the batches, or the error it raises."""
    saved, log_module._C_VALIDATE = log_module._C_VALIDATE, None
    try:
        return log.validate(data)
    except InvalidRecordError as error:
        return error
    finally:
        log_module._C_VALIDATE = saved


def check(log: Log, data: Any) -> Any:
    """The C checks accept what Python accepts, with the same headers, and nothing else."""
    py = python_validate(log, data)
    c = _clog.validate(data, log.config.max_message_bytes)
    if isinstance(py, InvalidRecordError):
        assert c is None, f"C accepted data the Python code refuses ({py})"
    else:
        assert c == py
        assert all(type(h) is BatchHeader and type(pos) is int for pos, h in c)
    return c


def batches() -> list[bytes]:
    return [
        build_batch([(None, b"v" * 200)]),
        build_batch([(b"k%d" % i, b"v" * i, 1_000 + i, [("h", b"x")]) for i in range(50)]),
        build_batch([(b"k", b"v" * 5_000)], producer_id=7, producer_epoch=3, base_sequence=11),
        build_batch([(b"k", b"value" * 50)] * 5, compression=Compression.GZIP, transactional=True,
                    producer_id=2**40, producer_epoch=32767, base_sequence=2**31 - 5),
        build_control_batch(5, 1, True, 3, 1_700_000_000_000),
    ]


@needs_c
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_valid_data_gives_the_same_batches_and_headers(log: Log, kind: type) -> None:
    every = batches()
    for data in [*every, b"".join(every), every[0] * 3]:
        assert check(log, kind(data)) is not None


@needs_c
def test_the_c_checks_refuse_what_python_refuses(log: Log) -> None:
    good = batches()[1]
    assert check(log, b"") is None
    for end in range(len(good)):
        assert check(log, good[:end]) is None
    assert check(log, good + b"\x00") is None  # a partial second header
    for magic in (0, 1, 3, 0xFF):
        assert check(log, good[:16] + bytes([magic]) + good[17:]) is None
    flipped = bytearray(good)
    flipped[100] ^= 1
    assert check(log, bytes(flipped)) is None  # the CRC



@needs_c
def test_a_batch_over_max_message_bytes_is_refused_as_python_refuses_it(tmp_path: Path) -> None:
    good = batches()[1]
    for limit, accepted in ((len(good) - 1, False), (len(good), True)):
        small = Log.open(tmp_path / f"s{limit}-0", LogConfig.from_kafka({"max.message.bytes": str(limit)}))
        try:
            assert (check(small, good) is not None) is accepted
        finally:
            small.close()


def _restamped(batch: bytes, **fields: int) -> bytes:
    """``batch`` with header fields replaced and its CRC made right again."""
    data = bytearray(batch)
    at = {"batch_length": (8, ">i"), "last_offset_delta": (23, ">i"), "records_count": (57, ">i")}
    for name, value in fields.items():
        position, fmt = at[name]
        struct.pack_into(fmt, data, position, value)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return bytes(data)


@needs_c
@pytest.mark.parametrize("fields", [
    {"last_offset_delta": -1}, {"records_count": -1}, {"records_count": 7}, {"last_offset_delta": 0},
    {"batch_length": 48}, {"batch_length": 2**31 - 1}, {"records_count": 0},
])
def test_header_rules_are_the_pythons(log: Log, fields: dict[str, int]) -> None:
    check(log, _restamped(batches()[1], **fields))


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 4), seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 3), fix_crc=st.booleans())
def test_mutated_batches_are_judged_as_python_judges_them(
        log: Log, which: int, seed: int, flips: int, fix_crc: bool) -> None:
    data = bytearray(batches()[which])
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(min(len(data), 70))] = rng.randrange(256)  # mostly the header
    if fix_crc and len(data) > 21:
        struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    check(log, bytes(data))


def test_a_compacted_topics_keys_are_still_checked(tmp_path: Path) -> None:
    compacted = Log.open(tmp_path / "c-0", LogConfig.from_kafka({"cleanup.policy": "compact"}))
    try:
        from pulllog.log import RecordErrors

        with pytest.raises(RecordErrors):
            compacted.validate(build_batch([(None, b"no key")]))
        assert compacted.validate(build_batch([(b"k", b"v")]))
    finally:
        compacted.close()
