"""Segment files open on demand through a bounded cache (pulllog.log.handles)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pulllog.log import Log, LogConfig
from pulllog.log.handles import HANDLES
from pulllog.records import build_batch
from pulllog.records.batch import RecordBatch


def batch(value: bytes) -> bytes:
    return build_batch([(None, value, 1_000)])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache():
    before = HANDLES.max_open
    HANDLES.resize(4)
    yield HANDLES
    HANDLES.resize(before)


def test_many_logs_stay_within_the_cap(tmp_path: Path, small_cache) -> None:
    config = LogConfig(segment_bytes=200)  # a roll every batch or two: many segments per log
    baseline = open_fds()
    logs = [Log.open(tmp_path / f"t-{i}", config) for i in range(30)]
    for round_ in range(4):
        for i, log in enumerate(logs):
            log.append(batch(f"{i}-{round_}".encode() * 10))
    assert open_fds() - baseline <= small_cache.max_open
    for i, log in enumerate(logs):
        values = [r.value for b in log.read_batches(0, 1 << 20) for r in b.records()]
        assert values[0] == f"{i}-0".encode() * 10
        assert len(log.segments) > 1
    assert open_fds() - baseline <= small_cache.max_open
    for log in logs:
        log.close()
    reopened = [Log.open(tmp_path / f"t-{i}", config) for i in range(30)]
    assert open_fds() - baseline <= small_cache.max_open
    assert [log.log_end_offset for log in reopened] == [4] * 30
    for log in reopened:
        log.close()


def test_a_slice_outlives_eviction_and_deletion(tmp_path: Path, small_cache) -> None:
    config = LogConfig(segment_bytes=200, retention_bytes=0)
    log = Log.open(tmp_path / "t-0", config)
    for n in range(3):
        log.append(batch(f"v{n}".encode() * 20))
    piece = log.read(0, 1 << 20)
    assert piece is not None
    others = [Log.open(tmp_path / f"o-{i}", config) for i in range(10)]  # evicts t-0's files
    for other in others:
        other.append(batch(b"x"))
    assert log.delete_old_segments() >= 1  # unlinks the segment the slice reads
    assert RecordBatch.from_bytes(piece.read()).records()[0].value == b"v0" * 20
    first = log.segments[0]
    assert log.read(first.base_offset, 1 << 20) is not None
    for other in others:
        other.close()
    log.close()


def test_a_deleted_segment_is_not_recreated_by_a_late_read(tmp_path: Path, small_cache) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200, retention_bytes=0))
    for n in range(3):
        log.append(batch(f"v{n}".encode() * 20))
    old = log.segments[0]
    log.delete_old_segments()
    with pytest.raises(FileNotFoundError):
        old.read_bytes(0, 10)  # reopening refuses: no empty file comes back
    assert not old.log_path.exists()
    log.close()


def test_a_cached_file_is_handed_out_without_the_cache_lock(tmp_path: Path) -> None:
    # (an append asks for its segment's file with every Produce request; the lock is for
    # opening and evicting, which another thread may be doing meanwhile)
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(batch(b"first"))
    got: list[object] = []
    with HANDLES._lock:  # another thread opening a file
        reader = threading.Thread(target=lambda: got.append(log.active_segment.file))
        reader.start()
        reader.join(10.0)
        assert got and not reader.is_alive(), "a cache hit waited for the lock"
    log.append(batch(b"second"))
    assert [r.value for b in log.read_batches(0) for r in b.records()] == [b"first", b"second"]
    log.close()

