"""The data directory's clean-shutdown marker (``.kafka_cleanshutdown``) and what a clean start
and a clean stop cost: one marker and one checkpoint per data dir, nothing read per partition
at a clean start, no fsync for a partition with nothing unflushed at a clean stop.

A "crash" here is a TopicManager that is never closed (what SIGKILL leaves on disk: files
written, no marker); the processes themselves are in test_serve_process and
test_recovery_checkpoint_file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from pulllog.broker import Broker
from pulllog.broker import topics as topics_module
from pulllog.broker.topics import SYNC_AT_ONCE_FROM, TopicManager
from pulllog.log import Log, LogConfig
from pulllog.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    read_offsets,
    write_offsets,
)
from pulllog.log.clean_shutdown import CLEAN_SHUTDOWN_MARKER
from pulllog.log.handles import HANDLES
from pulllog.log.log import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE
from pulllog.log.segment import LogSegment
from pulllog.records import build_batch


class Crash(BaseException):
    """The process dies here (not an OSError: nothing catches it)."""


def started(data: Path) -> tuple[TopicManager, list[str]]:
    manager = TopicManager(data, LogConfig())
    return manager, manager.load()


def fill(manager: TopicManager, name: str, partitions: int, records: int = 3) -> None:
    topic = manager.find(name) or manager.create(name, partitions)
    for partition in topic.partitions.values():
        for i in range(records):
            partition.log.append(build_batch([(None, b"%s-%d-%d" % (name.encode(), partition.index, i))]))


def values(manager: TopicManager, name: str, index: int) -> list[bytes | None]:
    log = manager.partition(name, index).log
    return [r.value for b in log.read_batches(log.log_start_offset) for r in b.records()]


def expected(name: str, index: int, records: int = 3) -> list[bytes]:
    return [b"%s-%d-%d" % (name.encode(), index, i) for i in range(records)]


def tear_tail(data: Path, name: str, index: int) -> None:
    """What a crash in the middle of a write leaves: half a batch after the last whole one."""
    with open(data / f"{name}-{index}" / f"{0:020d}.log", "ab") as f:
        f.write(build_batch([(None, b"torn")])[:30])


def test_a_clean_stop_leaves_one_marker_naming_every_partition_with_its_log_end(tmp_path: Path) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 3)
    fill(manager, "b", 2, records=5)
    manager.close()
    assert read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER) == {
        ("a", 0): 3, ("a", 1): 3, ("a", 2): 3, ("b", 0): 5, ("b", 1): 5}
    assert not list(tmp_path.glob(f"*/{CLEAN_SHUTDOWN_FILE}"))  # none per partition


def test_the_marker_is_removed_at_start_before_any_log_is_opened(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 2)
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    seen: list[bool] = []
    real_open = Log.open

    def open_log(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((tmp_path / CLEAN_SHUTDOWN_MARKER).exists())
        return real_open(*args, **kwargs)

    monkeypatch.setattr(Log, "open", open_log)
    manager, report = started(tmp_path)
    assert seen == [False, False]
    assert report == []  # clean: nothing recovered
    # Appended, then the process dies: the next start must not take the logs for clean.
    fill(manager, "a", 2)
    tear_tail(tmp_path, "a", 0)
    manager, report = started(tmp_path)
    assert any(line.startswith("a-0: recovered after unclean shutdown") and "truncated" in line for line in report)
    assert values(manager, "a", 0) == expected("a", 0) * 2
    manager.close()


def test_a_crash_between_closing_the_partitions_and_writing_the_marker_means_recovery(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 3)

    def crash(*_args: object) -> None:
        raise Crash

    monkeypatch.setattr(topics_module, "write_marker", crash)
    with pytest.raises(Crash):
        manager.close()  # every log closed, both checkpoints written, then the process dies
    monkeypatch.undo()
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    tear_tail(tmp_path, "a", 1)  # damage a clean open would not look for at start
    manager, report = started(tmp_path)
    recovered = sorted(line.split(":")[0] for line in report if "recovered after unclean shutdown" in line)
    assert recovered == ["a-0", "a-1", "a-2"]
    assert any(line.startswith("a-1:") and "truncated" in line for line in report)
    assert [values(manager, "a", i) for i in range(3)] == [expected("a", i) for i in range(3)]
    manager.close()


def test_a_partition_the_marker_does_not_name_is_recovered_the_others_read_on_first_use(tmp_path: Path) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 2)
    manager.close()
    marker = tmp_path / CLEAN_SHUTDOWN_MARKER
    write_offsets(marker, {("a", 0): 3})  # a-1 not covered (say its close failed)
    tear_tail(tmp_path, "a", 0)
    tear_tail(tmp_path, "a", 1)
    manager, report = started(tmp_path)
    assert [line.split(":")[0] for line in report] == ["a-1"]  # recovered at start
    assert "truncated" in report[0]
    # a-0 is trusted as Kafka trusts a clean shutdown; its first use still finds the torn
    # tail (the clean-open checks of the batches after the last index entry) and cuts it.
    assert values(manager, "a", 0) == expected("a", 0)
    assert values(manager, "a", 1) == expected("a", 1)
    log = manager.partition("a", 0).log
    log.append(build_batch([(None, b"more")]))
    assert log.log_end_offset == 4
    manager.close()


def test_a_clean_start_opens_no_segment_file_and_a_read_opens_only_its_partition(tmp_path: Path) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 20)
    manager.close()
    opened = HANDLES.opened
    manager, report = started(tmp_path)
    assert report == []
    assert HANDLES.opened == opened  # no .log, .index or .timeindex opened by the start
    assert values(manager, "a", 7) == expected("a", 7)
    assert not any(p.log.segments[0].loaded for p in manager.get("a").partitions.values() if p.index != 7)
    manager.close()


def test_a_segment_read_on_first_use_reads_its_attributes_without_the_lazy_hook(tmp_path: Path) -> None:
    # (a class with __getattr__ sends every attribute read through Python's slower hook, and
    # an active segment's are read ~30 times per Produce request)
    manager, _ = started(tmp_path)
    fill(manager, "a", 2)
    manager.close()
    manager, _ = started(tmp_path)
    segment = manager.partition("a", 0).log.segments[0]
    assert not segment.loaded and hasattr(type(segment), "__getattr__")
    assert segment.size > 0  # its file stat()ed on first use: its indexes still unread
    assert not segment.loaded and hasattr(type(segment), "__getattr__")
    assert values(manager, "a", 0) == expected("a", 0)
    assert segment.loaded and type(segment) is LogSegment
    assert not hasattr(LogSegment, "__getattr__")
    manager.partition("a", 0).log.append(build_batch([(None, b"more")]))
    assert segment.next_offset == manager.partition("a", 0).log.log_end_offset
    manager.close()


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_clean_stop_fsyncs_only_the_logs_with_unflushed_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 20)
    manager.close()
    manager, _ = started(tmp_path)
    manager.partition("a", 3).log.append(build_batch([(None, b"new")]))
    synced = count_fsyncs(monkeypatch)
    manager.close()
    partition_files = sorted({Path(p).parent.name for p in synced if Path(p).parent.name.startswith("a-")})
    assert partition_files == ["a-3"]  # the 19 others had nothing to fsync
    assert read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER)[("a", 3)] == 4


def test_many_dirty_logs_are_synced_at_once_not_one_fsync_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", SYNC_AT_ONCE_FROM * 2)
    synced = count_fsyncs(monkeypatch)
    syncs: list[Path] = []
    real_sync = topics_module.sync_file_system

    def sync_file_system(path: Path) -> bool:
        syncs.append(path)
        return real_sync(path)

    monkeypatch.setattr(topics_module, "sync_file_system", sync_file_system)
    manager.close()
    assert syncs == [tmp_path]
    assert not [p for p in synced if Path(p).parent.name.startswith("a-")]
    # Synced means flushed: the recovery points moved to the log ends, and the start is clean.
    assert set(read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE).values()) == {3}
    manager, report = started(tmp_path)
    assert report == []
    assert values(manager, "a", 5) == expected("a", 5)
    manager.close()


def test_a_failed_sync_falls_back_to_an_fsync_per_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", SYNC_AT_ONCE_FROM)

    def sync_file_system(path: Path) -> bool:
        raise OSError(5, f"syncfs of {path}: Input/output error")

    monkeypatch.setattr(topics_module, "sync_file_system", sync_file_system)
    synced = count_fsyncs(monkeypatch)
    manager.close()
    assert {Path(p).parent.name for p in synced if Path(p).parent.name.startswith("a-")} == {
        f"a-{i}" for i in range(SYNC_AT_ONCE_FROM)}
    assert len(read_offsets(tmp_path / CLEAN_SHUTDOWN_MARKER)) == SYNC_AT_ONCE_FROM


def test_the_log_start_offset_comes_from_the_data_dirs_checkpoint_after_a_clean_stop(tmp_path: Path) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 2)
    manager.partition("a", 1).log.delete_records_before(2)
    manager.close()
    assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT_FILE) == {("a", 1): 2}
    (tmp_path / "a-1" / LOG_START_OFFSET_FILE).unlink()  # not read after a clean stop
    manager, _ = started(tmp_path)
    assert [manager.partition("a", i).log.log_start_offset for i in range(2)] == [0, 2]
    # After a crash the log's own file counts too: it is written at every change.
    manager.partition("a", 0).log.delete_records_before(1)
    manager, _ = started(tmp_path)
    assert [manager.partition("a", i).log.log_start_offset for i in range(2)] == [1, 2]
    manager.close()


async def test_a_start_after_a_crash_sums_up_the_undamaged_recoveries_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager, _ = started(tmp_path)
    fill(manager, "a", 25)  # and the process dies
    tear_tail(tmp_path, "a", 3)
    with caplog.at_level(logging.WARNING, logger="pulllog.broker"):
        async with Broker(tmp_path, port=0) as broker:
            assert len(broker.recovery_report) == 25  # the report itself keeps every partition
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recovery:")]
    assert len(lines) == 2
    assert lines[0].startswith("recovery: a-3: recovered after unclean shutdown") and "truncated" in lines[0]
    assert lines[1].startswith("recovery: 24 partitions recovered after unclean shutdown, none damaged")
