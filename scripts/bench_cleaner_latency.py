#!/usr/bin/env python3
"""Produce latency on one topic while a large compacted topic is being cleaned.

A broker (``pulllog serve``) runs in its own process with ``log.cleaner.backoff.ms=1000``.
The script fills a topic ``big`` (``--size`` bytes, default 1 GB, of ``--value-bytes``
values over ``--keys`` keys, default 100k) created with ``cleanup.policy=delete`` and no
retention, so nothing cleans it. Then a probe sends Produce requests to another topic,
one record per request, acks=1, one at a time on one connection, and records each round
trip:

1. ``no cleaning``: for ``--baseline-seconds``;
2. ``cleaning``: ``big`` is switched to ``cleanup.policy=compact`` (IncrementalAlterConfigs)
   and the probe runs until the first clean of ``big`` is over (the broker logged
   ``big-0: cleaned ...`` and no ``.cleaned``/``.swap`` file is left), at most
   ``--max-seconds``.

Run it under two PYTHONPATHs to compare code (the broker inherits it)::

    PYTHONPATH=src python scripts/bench_cleaner_latency.py
    PYTHONPATH=src python scripts/bench_cleaner_latency.py --size 200M   # a quicker run

It prints the machine, the date, and p50 / p99 / max round trip per phase.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

BIG, PROBE = "big", "probe"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(data_dir),
         "--listen", f"127.0.0.1:{port}", "--override", "log.cleaner.backoff.ms=1000"],
        stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the broker exited: see {log_path}") from None
            time.sleep(0.05)
    raise SystemExit("the broker did not start listening")


def one_record_batch(value: bytes) -> bytes:
    """A RecordBatch v2 holding one keyless record (CRC-32C over attributes onwards)."""
    try:
        from pulllog.records.batch import build_batch  # type: ignore[import-not-found]
    except ImportError:
        from pulllog.log.records import build_batch
    return build_batch([(None, value)])


def produce_request(correlation_id: int, records: bytes) -> bytes:
    """Produce v3, acks=1, one partition of topic ``probe``, encoded by hand."""
    client = b"bench-cleaner"
    topic = PROBE.encode()
    body = struct.pack(">hhih", 0, 3, correlation_id, len(client)) + client
    body += struct.pack(">hhi", -1, 1, 30_000)  # transactional id null, acks, timeout
    body += struct.pack(">ih", 1, len(topic)) + topic
    body += struct.pack(">iii", 1, 0, len(records)) + records
    return struct.pack(">i", len(body)) + body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise SystemExit("the broker closed the probe connection")
        buf += chunk
    return bytes(buf)


class Probe:
    """One connection, one Produce request at a time; round trips in milliseconds."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = produce_request(1, one_record_batch(os.urandom(100)))

    def run(self, stop: threading.Event, out: list[float]) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            self.sock.sendall(self.request)
            (size,) = struct.unpack(">i", recv_exactly(self.sock, 4))
            recv_exactly(self.sock, size)
            out.append((time.perf_counter() - start) * 1000)

    def measure(self, done: "callable[[], bool]", max_seconds: float) -> list[float]:  # type: ignore[valid-type]
        out: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(stop, out))
        thread.start()
        deadline = time.monotonic() + max_seconds
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join()
        return out


def fill(bootstrap: str, size: int, keys: int, value_bytes: int) -> int:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 2, "batch.size": 512 << 10,
                                         "queue.buffering.max.kbytes": 1 << 20, "acks": 1})
    value = os.urandom(value_bytes)
    rng = random.Random(7)
    records = size // (value_bytes + 40)
    for i in range(records):
        key = b"key-%06d" % rng.randrange(keys)
        while True:
            try:
                producer.produce(BIG, value, key, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(600):
        raise SystemExit("filling the big topic did not finish")
    return records


def segments_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def cleaning_files(directory: Path) -> bool:
    return any(p.name.endswith((".cleaned", ".swap")) for p in directory.iterdir())


def summary(name: str, rtts: list[float]) -> str:
    if not rtts:
        return f"| {name:12} | {0:>8} | {'-':>8} | {'-':>8} | {'-':>9} |"
    ordered = sorted(rtts)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"| {name:12} | {len(rtts):>8} | {statistics.median(ordered):8.2f} | {p99:8.2f} | "
            f"{ordered[-1]:9.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1G", help="bytes written to the compacted topic (K/M/G suffixes)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--segment-bytes", default="64M")
    parser.add_argument("--baseline-seconds", type=float, default=20)
    parser.add_argument("--max-seconds", type=float, default=900)
    args = parser.parse_args()
    size = parse_size(args.size)

    import pulllog

    with tempfile.TemporaryDirectory(prefix="bench-cleaner-") as tmp:
        data = Path(tmp) / "data"
        port = free_port()
        broker = start_broker(data, port, Path(tmp) / "broker.log")
        bootstrap = f"127.0.0.1:{port}"
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
            big = NewTopic(BIG, 1, 1, config={"cleanup.policy": "delete", "retention.ms": "-1",
                                              "segment.bytes": str(parse_size(args.segment_bytes))})
            for future in admin.create_topics([big, NewTopic(PROBE, 1, 1)]).values():
                future.result(30)
            started = time.monotonic()
            records = fill(bootstrap, size, args.keys, args.value_bytes)
            directory = data / f"{BIG}-0"
            filled = segments_bytes(directory)
            print(f"filled {BIG}: {records} records, {filled / 2**20:.0f} MiB in "
                  f"{time.monotonic() - started:.0f} s", flush=True)

            probe = Probe(port)
            probe.measure(lambda: False, 1.0)  # warm up
            baseline = probe.measure(lambda: False, args.baseline_seconds)

            resource = ConfigResource(ResourceType.TOPIC, BIG, incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
            started = time.monotonic()

            broker_log = Path(tmp) / "broker.log"

            def cleaned() -> bool:
                return f"{BIG}-0: cleaned " in broker_log.read_text() and not cleaning_files(directory)

            during = probe.measure(cleaned, args.max_seconds)
            took = time.monotonic() - started
            finished = cleaned()
            after = segments_bytes(directory)
        finally:
            broker.terminate()
            broker.wait(60)

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"\npulllog from {Path(pulllog.__file__).parent}")
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.system()} "
          f"{platform.release()}, {os.cpu_count()} CPU(s) {cpu}, Python {platform.python_version()}")
    print(f"compacted topic: {filled / 2**20:.0f} MiB, {records} records over {args.keys} keys, "
          f"segment.bytes {args.segment_bytes}; cleaning {'took' if finished else 'NOT DONE after'} "
          f"{took:.1f} s ({filled / 2**20:.0f} -> {after / 2**20:.0f} MiB)")
    print("| phase        | requests |  p50 ms  |  p99 ms  |  max ms   |")
    print("|--------------|---------:|---------:|---------:|----------:|")
    print(summary("no cleaning", baseline))
    print(summary("cleaning", during))


if __name__ == "__main__":
    main()
