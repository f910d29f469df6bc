#!/usr/bin/env python3
"""Does zero-copy fetch pay? Consume throughput and broker CPU with sendfile on and off.

Starts a broker process, produces N 200-byte messages with librdkafka (confluent-kafka),
then consumes them all with librdkafka several times, once with the broker sending segment
bytes with sendfile and once with pread + write. Broker CPU is read from /proc for the
broker process only, which is steadier than wall-clock throughput on a shared machine.

    python scripts/bench_fetch.py [--messages 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import confluent_kafka

BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from pulllog.broker import Broker
    async def main():
        broker = Broker(data_dir=sys.argv[1], port=int(sys.argv[2]))
        broker.zero_copy = sys.argv[3] == "1"
        async with broker:
            print("ready", flush=True)
            await asyncio.Event().wait()  # until the benchmark terminates this process
    asyncio.run(main())
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(data_dir: str, port: int, zero_copy: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", BROKER, data_dir, str(port), "1" if zero_copy else "0"],
                            stdout=subprocess.PIPE, stderr=open(os.path.join(data_dir, "..", "broker.err"), "a"), text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def produce(bootstrap: str, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                                 "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(200)
    for _ in range(n):
        while True:
            try:
                p.produce("bench", value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0


def consume(bootstrap: str, n: int) -> float:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 1048576})
    c.assign([confluent_kafka.TopicPartition("bench", 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < n:
        got += len(c.consume(100_000, 1.0))
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def raw_consume(port: int, n_bytes_total: int, max_bytes: int) -> tuple[float, int]:
    """Fetch the whole partition with big Fetch requests and discard the bytes: the client
    does almost nothing, so the broker's cost per byte shows."""
    import struct

    from pulllog.records.batch import iter_batches
    from pulllog.net.build import build, request_class
    from pulllog.net.protocol import encode_request

    sock = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(max_bytes + (1 << 20))
    view = memoryview(buf)
    offset, requests, got = 0, 0, 0
    start = time.perf_counter()
    while got < n_bytes_total:
        body = build(request_class("fetch", 12), {
            "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "bench", "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]})
        sock.sendall(encode_request(body, correlation_id=requests, client_id="bench"))
        head = sock.recv(4, socket.MSG_WAITALL)
        size = struct.unpack(">i", head)[0]
        read = 0
        while read < size:
            read += sock.recv_into(view[read:size], size - read)
        last = None
        records_start = size - _records_len(view, size)
        for _pos, header in iter_batches(view[records_start:size - 3]):
            last = header
        offset = last.next_offset
        got += size
        requests += 1
    elapsed = time.perf_counter() - start
    sock.close()
    return elapsed, requests


def _records_len(view: memoryview, size: int) -> int:
    """Fetch v12 one-topic one-partition response: records are the last field before three
    tag buffers; their compact length varint precedes them. Walk from the fixed header."""
    from pulllog.net.guard import read_uvarint

    data = bytes(view[:size])
    pos = 4 + 1 + 4 + 2 + 4  # corr id, header tags, throttle, error, session
    pos += 1  # topics array count (1)
    name_len, pos = read_uvarint(data, pos, size)
    pos += name_len - 1
    pos += 1  # partitions count
    pos += 4 + 2 + 8 + 8 + 8  # index, error, hw, lso, log start
    n_aborted, pos = read_uvarint(data, pos, size)
    pos += 4  # preferred read replica
    rec_len, pos = read_uvarint(data, pos, size)
    return size - pos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="pulllog-bench-fetch-")
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = start_broker(data_dir, port, True)
    try:
        produce(bootstrap, args.messages)
    finally:
        proc.terminate()
        proc.wait()
    print(f"# fetch path, {dt.date.today()}, {platform.machine()}, {os.cpu_count()} cpu(s), "
          f"Python {platform.python_version()}, librdkafka {confluent_kafka.libversion()[0]}")
    print(f"# {args.messages:,} messages of 200 bytes, one partition, {args.runs} consume runs each (median)\n")
    print("| fetch path | client | consume msgs/s | consume MB/s | broker CPU s per million msgs |")
    print("|---|---|---|---|---|")
    for zero_copy in (True, False):
        walls, cpus = [], []
        for _ in range(args.runs):
            proc = start_broker(data_dir, port, zero_copy)
            try:
                before = cpu_seconds(proc.pid)
                walls.append(consume(bootstrap, args.messages))
                cpus.append(cpu_seconds(proc.pid) - before)
            finally:
                proc.terminate()
                proc.wait()
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        name = "sendfile (zero copy)" if zero_copy else "pread + write"
        print(f"| {name} | librdkafka | {args.messages / wall:,.0f} | {args.messages * 270 / wall / 1e6:,.1f} | "
              f"{cpu / args.messages * 1e6:.2f} |")
        walls, cpus = [], []
        total = sum(os.path.getsize(os.path.join(data_dir, "bench-0", f))
                    for f in os.listdir(os.path.join(data_dir, "bench-0")) if f.endswith(".log"))
        for _ in range(args.runs):
            proc = start_broker(data_dir, port, zero_copy)
            try:
                before = cpu_seconds(proc.pid)
                wall, _requests = raw_consume(port, total, 32 << 20)
                walls.append(wall)
                cpus.append(cpu_seconds(proc.pid) - before)
            finally:
                proc.terminate()
                proc.wait()
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"| {name} | raw 32 MiB fetches | {args.messages / wall:,.0f} | {total / wall / 1e6:,.1f} | "
              f"{cpu / args.messages * 1e6:.3f} |")


if __name__ == "__main__":
    main()
