"""Crash recovery: a torn tail, flipped bytes and junk are cut off; nothing before them is lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pulllog.log import Log, LogConfig
from pulllog.records import build_batch
from pulllog.records.batch import iter_batches

from log_contents import all_values


def fill(directory: Path, batches: int, config: LogConfig | None = None) -> list[tuple[int, int]]:
    """Append, then 'crash' (no close, so no clean-shutdown marker). Returns batch positions."""
    log = Log.open(directory, config)
    for i in range(batches):
        log.append(build_batch([(b"key-%d" % i, b"value-%d" % i * 20, 1000 + i)] * 2))
    seg = log.active_segment
    positions = [(pos, h.base_offset) for pos, h in seg.headers()]
    log.active_segment.file.flush()
    return positions


def reopen(directory: Path, config: LogConfig | None = None) -> Log:
    return Log.open(directory, config)


def verify(segment: Path) -> tuple[int, str]:
    """`pulllog inspect segment --verify`: (exit code, output)."""
    from click.testing import CliRunner

    from pulllog.cli.main import main

    result = CliRunner().invoke(main, ["inspect", "segment", str(segment), "--verify"])
    return result.exit_code, result.output


def test_torn_tail_mid_batch_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    positions = fill(d, 10)
    seg_file = d / "00000000000000000000.log"
    size = seg_file.stat().st_size
    cut = positions[7][0] + 30  # in the middle of the 8th batch
    with open(seg_file, "r+b") as f:
        f.truncate(cut)
    code, out = verify(seg_file)
    assert code == 1 and f"position {positions[7][0]}" in out
    log = reopen(d)
    assert not log.recovery.clean
    assert log.log_end_offset == 14  # 7 whole batches of 2 records
    assert log.recovery.truncated_bytes == 30
    assert len(all_values(log)) == 14
    assert seg_file.stat().st_size == positions[7][0] < size
    assert log.append(build_batch([(b"x", b"y")])).first_offset == 14


def test_flipped_bytes_truncate_at_the_damaged_batch(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    positions = fill(d, 10)
    seg_file = d / "00000000000000000000.log"
    data = bytearray(seg_file.read_bytes())
    data[positions[4][0] + 70] ^= 0x01  # inside the records of the 5th batch
    seg_file.write_bytes(data)
    code, out = verify(seg_file)
    assert code == 1 and f"position {positions[4][0]}" in out
    log = reopen(d)
    assert log.log_end_offset == 8
    assert "CRC" in log.recovery.problems[0]
    assert all_values(log) == [b"value-%d" % (i // 2) * 20 for i in range(8)]


def test_junk_appended_after_the_last_batch_is_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    fill(d, 5)
    seg_file = d / "00000000000000000000.log"
    good = seg_file.read_bytes()
    with open(seg_file, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09" + b"\xde\xad\xbe\xef" * 40)
    code, out = verify(seg_file)
    assert code == 1 and f"position {len(good)}" in out
    log = reopen(d)
    assert log.log_end_offset == 10
    assert seg_file.read_bytes() == good
    assert verify(seg_file)[0] == 0  # recovery left a clean segment
    assert [h.base_offset for _, h in iter_batches(good)] == [0, 2, 4, 6, 8]


def test_a_zeroed_tail_as_after_power_loss_is_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    fill(d, 5)
    seg_file = d / "00000000000000000000.log"
    with open(seg_file, "ab") as f:
        f.write(bytes(4096))
    log = reopen(d)
    assert log.log_end_offset == 10


def test_damage_in_an_older_segment_drops_the_segments_after_it(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    config = LogConfig.from_kafka({"segment.bytes": "1000"})
    fill(d, 20, config)
    names = sorted(p.name for p in d.glob("*.log"))
    assert len(names) > 3
    second = d / names[1]
    data = bytearray(second.read_bytes())
    data[100] ^= 0xFF
    second.write_bytes(data)
    log = reopen(d, config)
    assert log.log_end_offset == int(names[1][:20])  # everything from the damage on is gone
    # the damaged segment lost its only batch, so it went too, with all after it
    assert [s.base_offset for s in log.segments] == [0]
    assert log.recovery.deleted_segments == len(names) - 1
    assert log.append(build_batch([(b"k", b"v")])).first_offset == log.log_end_offset - 1


def test_clean_shutdown_skips_validation(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d)
    log.append(build_batch([(b"k", b"v")]))
    log.close()
    again = reopen(d)
    assert again.recovery.clean and again.recovery.batches_checked == 0


def test_a_clean_open_rebuilds_an_index_that_inspect_finds_out_of_order(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(index_interval_bytes=100))
    for i in range(10):
        log.append(build_batch([(b"k%d" % i, b"v" * 100, 1000 + i)]))
    log.close()
    index = d / "00000000000000000000.index"
    entries = index.read_bytes()
    assert len(entries) >= 16
    index.write_bytes(entries[8:16] + entries[:8] + entries[16:])  # first two entries swapped
    code, out = verify(index)
    assert code == 1 and "entry 1 at file position 8: out of order" in out
    again = reopen(d)
    assert again.recovery.clean and again.recovery.segments_checked == 1  # load refused the index
    assert verify(index)[0] == 0  # rebuilt
    assert len(all_values(again)) == 10


def test_a_clean_open_recovers_a_tail_batch_that_inspect_finds_damaged(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d)
    for i in range(3):
        log.append(build_batch([(b"k%d" % i, b"v" * 100, 1000 + i)]))
    log.close()
    seg_file = d / "00000000000000000000.log"
    data = bytearray(seg_file.read_bytes())
    data[-5] ^= 0xFF  # in the last batch's value: its CRC no longer holds
    seg_file.write_bytes(data)
    code, out = verify(seg_file)
    assert code == 1 and "CRC mismatch" in out
    again = reopen(d)
    assert again.recovery.segments_checked == 1
    assert again.log_end_offset == 2 and len(all_values(again)) == 2


def test_recovery_checks_only_what_is_past_the_recovery_point(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    config = LogConfig.from_kafka({"segment.bytes": "1000"})
    log = Log.open(d, config)
    for i in range(20):
        log.append(build_batch([(b"k", b"v" * 100)]))
    log.flush()
    log.append(build_batch([(b"k", b"after flush")]))
    recovery_point = log.recovery_point  # what the broker's checkpoint holds
    del log
    again = Log.open(d, config, recovery_point=recovery_point)
    assert again.recovery.segments_checked == 1
    assert again.log_end_offset == 21


WRITER = textwrap.dedent(
    """
    import sys
    from pulllog.log import Log
    from pulllog.records import build_batch
    log = Log.open(sys.argv[1])
    i = 0
    while True:
        info = log.append(build_batch([(b"k%d" % i, b"v%d" % i * 50)] * 5))
        # acknowledged: printed only after append() returned, as a broker acks after it
        print(info.last_offset, flush=True)
        i += 1
    """
)


def test_sigkill_mid_append_stream_loses_nothing_acknowledged(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], stdout=subprocess.PIPE, text=True)
    try:
        acked = -1
        deadline = time.monotonic() + 30
        while acked < 5000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert acked >= 5000, "writer did not get far enough"
    log = reopen(d)
    assert log.log_end_offset >= acked + 1
    values = all_values(log)
    assert len(values) == log.log_end_offset  # no gap
    assert values[acked] == b"v%d" % (acked // 5) * 50
