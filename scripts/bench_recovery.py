#!/usr/bin/env python3
"""Restart time of ``pulllog serve`` against the data it holds: clean, and after SIGKILL.

For each size (default 0.5, 1, 2 and 5 GB) the script:

1. starts ``pulllog serve`` on a new data dir, creates topic ``bench`` with ``--partitions``
   partitions (default 10) and stops it (SIGTERM);
2. fills the partitions directly through ``pulllog.log.Log`` (faster than the wire, same
   files): batches of ``--batch-records`` records of ``--value-bytes`` bytes (default 16 x
   1 KiB, about 16 KiB a batch), the size split evenly, then closes the logs cleanly;
3. **clean restart**: starts ``pulllog serve`` and times it from spawn to the first
   accepted TCP connection (the broker listens only after every log is loaded);
4. waits until the recovery point of every partition on disk is its log end offset
   (``recovery-point-offset-checkpoint``, or an older pulllog's per-partition
   ``recovery-point`` file): everything was flushed before the kill;
5. **restart after SIGKILL**: kills the broker with SIGKILL and times the next start the
   same way, then stops it.

With ``--produce-mb N`` steps 4 and 5 differ: after the clean start it produces N MiB over
the wire (``log.segment.bytes`` ``--segment-bytes``, default 1 MiB, no flush settings),
waits ``--settle-s`` and kills the broker without any explicit flush: the batches checked
then show how far the flushes at segment roll moved the recovery point.

The data stays in the page cache between steps (it was just written): a machine that
restarts after a power loss reads it from the disk, which only makes a rescan slower.
Times include starting the Python interpreter (the ``python -c pass`` column).

Run it under two PYTHONPATHs to compare code (the broker inherits it)::

    PYTHONPATH=src python scripts/bench_recovery.py
    PYTHONPATH=src python scripts/bench_recovery.py --sizes 0.5G,1G     # a quicker run

Steps 3 to 5 run ``--repeat`` times (default 3) and the best is shown, as wall time and
as the CPU time the broker process used until then (the steadier figure on a shared
machine). It prints the machine, the date, and a table: size, batches, clean restart,
restart after SIGKILL, and the batches the restart checked (from the broker's recovery log
lines).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka.admin

import pulllog
from pulllog.log import Log, LogConfig
from pulllog.records import build_batch

TOPIC = "bench"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    suffix = text[-1].upper()
    return int(float(text[:-1]) * units[suffix]) if suffix in units else int(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """One ``pulllog serve`` process; ``started_s`` is spawn to first accepted connection."""

    def __init__(self, data_dir: Path, overrides: list[str]) -> None:
        self.port = free_port()
        self.log = data_dir.parent / f"serve-{self.port}.log"
        args = [sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(data_dir),
                "--listen", f"127.0.0.1:{self.port}"]
        for override in overrides:
            args += ["--override", override]
        began = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"pulllog serve exited with {self.proc.returncode}; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.005)
        self.started_s = time.monotonic() - began
        self.started_cpu_s = cpu_seconds(self.proc.pid)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def batches_checked(self) -> int:
        text = " ".join(self.log.read_text().split())  # the console log wraps long lines
        return sum(int(n) for n in re.findall(r"recovery: \S+: recovered after unclean shutdown: checked (\d+)", text))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(300)


def cpu_seconds(pid: int) -> float:
    """user + system CPU a process has used: what a start costs, whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(data_dir: Path, partitions: int, overrides: list[str]) -> None:
    broker = Serve(data_dir, overrides)
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        future = admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, partitions, 1)])[TOPIC]
        future.result(60)
    finally:
        broker.stop()


def fill(data_dir: Path, partitions: int, size: int, records: int, value_bytes: int) -> int:
    """Append about ``size`` bytes over the partitions; returns the number of batches."""
    value = os.urandom(value_bytes)
    batch = build_batch([(b"key-%d" % i, value, 1_700_000_000_000 + i) for i in range(records)])
    per_partition = size // partitions // len(batch)
    for p in range(partitions):
        log = Log.open(data_dir / f"{TOPIC}-{p}", LogConfig())
        for _ in range(per_partition):
            log.append(batch)
        log.close()
    # Written behind the broker's back: its data-dir clean-shutdown marker (from the topic's
    # creation) names the old log ends, so drop it: the next start recovers these logs as
    # after a crash, which moves their recovery points to their log ends (measure() makes
    # that start before it measures any).
    (data_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    return per_partition * partitions


def recovery_points(data_dir: Path, partitions: int) -> list[int]:
    """Each partition's recovery point on disk: the data dir's checkpoint, else the
    per-partition file older pulllog versions write."""
    points: dict[int, int] = {}
    path = data_dir / "recovery-point-offset-checkpoint"
    if path.exists():
        lines = path.read_text().splitlines()
        for line in lines[2:]:
            topic, partition, offset = line.split(" ")
            if topic == TOPIC:
                points[int(partition)] = int(offset)
    for p in range(partitions):
        legacy = data_dir / f"{TOPIC}-{p}" / "recovery-point"
        if p not in points and legacy.exists():
            points[p] = int(legacy.read_text() or 0)
    return [points.get(p, -1) for p in range(partitions)]


def log_end_offsets(bootstrap: str, partitions: int) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-recovery"})
    try:
        return [consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def interpreter_start_s() -> tuple[float, float]:
    """(wall, CPU) seconds of starting Python and importing pulllog's CLI, best of three."""
    runs = []
    for _ in range(3):
        before = os.times()
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", "import pulllog.cli.main"], check=True)
        after = os.times()
        runs.append((time.monotonic() - began,
                     after.children_user + after.children_system - before.children_user - before.children_system))
    return min(r[0] for r in runs), min(r[1] for r in runs)


@dataclass
class Row:
    size: int
    batches: int
    clean: list[tuple[float, float]] = field(default_factory=list)  # (wall s, CPU s) per start
    killed: list[tuple[float, float]] = field(default_factory=list)
    checked: int = 0


def measure(size: int, args: argparse.Namespace, workdir: Path) -> Row:
    """``--repeat`` rounds of: clean start, wait for the flushed checkpoint, SIGKILL, start."""
    data_dir = workdir / f"data-{size}"
    overrides = ["log.flush.offset.checkpoint.interval.ms=100"]
    if args.produce_mb:  # segments small enough to roll while producing
        overrides.append(f"log.segment.bytes={args.segment_bytes}")
    create_topic(data_dir, args.partitions, overrides)
    row = Row(size, fill(data_dir, args.partitions, size, args.batch_records, args.value_bytes))
    Serve(data_dir, overrides).stop()  # the first start recovers what fill wrote, then stops cleanly
    for _ in range(args.repeat):
        broker = Serve(data_dir, overrides)
        row.clean.append((broker.started_s, broker.started_cpu_s))
        if args.produce_mb:
            produce_unflushed(broker.bootstrap, args)
            broker.stop(signal.SIGKILL)
            again = Serve(data_dir, overrides)
            row.killed.append((again.started_s, again.started_cpu_s))
            row.checked = max(row.checked, again.batches_checked())
            again.stop()
            continue
        ends = log_end_offsets(broker.bootstrap, args.partitions)
        deadline = time.monotonic() + 60
        while recovery_points(data_dir, args.partitions) != ends:
            if time.monotonic() > deadline:
                raise SystemExit(f"recovery points {recovery_points(data_dir, args.partitions)} never reached {ends}")
            time.sleep(0.05)
        broker.stop(signal.SIGKILL)
        again = Serve(data_dir, overrides)
        row.killed.append((again.started_s, again.started_cpu_s))
        row.checked = max(row.checked, again.batches_checked())
        again.stop()
    shutil.rmtree(data_dir)
    return row


def produce_unflushed(bootstrap: str, args: argparse.Namespace) -> None:
    """``--produce-mb``: append over the wire with Kafka's default flush settings (no
    explicit flush), give the broker ``--settle-s`` for its roll flushes and a checkpoint
    write, and return: the SIGKILL then shows what a crash rechecks without a flush."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "batch.size": 16 * args.value_bytes + 1024})  # ~16 records a batch
    value = os.urandom(args.value_bytes)
    for i in range(args.produce_mb * 2**20 // args.value_bytes):
        while True:
            try:
                producer.produce(TOPIC, value, partition=i % args.partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0, "produce did not finish"
    time.sleep(args.settle_s)  # a benchmark may wait on the clock: roll flushes and a checkpoint


def best(times: list[tuple[float, float]]) -> str:
    wall = min(t[0] for t in times)
    cpu = min(t[1] for t in times)
    return f"{wall:5.2f} / {cpu:5.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.5G,1G,2G,5G", help="comma-separated data sizes")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--batch-records", type=int, default=16)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="restarts per size; the best is shown")
    parser.add_argument("--produce-mb", type=int, default=0,
                        help="also produce this many MiB over the wire after the clean start and "
                             "SIGKILL without waiting for a flush (recovery point from roll flushes)")
    parser.add_argument("--segment-bytes", type=int, default=1 << 20, help="log.segment.bytes with --produce-mb")
    parser.add_argument("--settle-s", type=float, default=2.0, help="wait after producing, before the SIGKILL")
    parser.add_argument("--dir", default=None, help="where to put the data dirs (default: a temporary dir)")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    baseline = interpreter_start_s()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-recovery-") as tmp:
        for size in sizes:
            rows.append(measure(size, args, Path(tmp)))
            print(f"  {size / 2**30:.1f} GiB done", file=sys.stderr)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"\npulllog from {Path(pulllog.__file__).parent}")
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.system()} "
          f"{platform.release()}, {os.cpu_count()} CPU(s) {cpu}, Python {platform.python_version()}")
    print(f"{args.partitions} partitions, batches of {args.batch_records} x {args.value_bytes} B, "
          f"best of {args.repeat}; load average {os.getloadavg()[0]:.1f}; starting Python and importing "
          f"pulllog alone: {baseline[0]:.2f} s wall / {baseline[1]:.2f} s CPU")
    print("start = spawn to first accepted connection, wall s / CPU s of the broker process")
    print("| data     | batches   | clean restart | restart after SIGKILL | batches checked after SIGKILL |")
    print("|----------|----------:|--------------:|----------------------:|------------------------------:|")
    for row in rows:
        print(f"| {row.size / 2**30:4.1f} GiB | {row.batches:9d} | {best(row.clean):>13} | "
              f"{best(row.killed):>21} | {row.checked:29d} |")


if __name__ == "__main__":
    main()
