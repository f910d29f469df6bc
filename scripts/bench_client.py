#!/usr/bin/env python3
"""Producer throughput of pulllog's asyncio client, beside aiokafka's, with 200-byte messages.

The paper's producer experiment (section 5) sends 200-byte messages one per request
("batch 1") and in sets of 50. Here, against a pulllog broker in its own process (so client
and broker do not share a core's event loop), one topic of one partition, acks=1 unless
the row says otherwise:

* one record per request: ``batch_size=1`` makes every record its own batch, and a
  partition has up to ``max_in_flight`` (5) of them in flight, each its own request;
  with acks=0 nothing waits for an answer, as the paper's producer did not;
* natural batching (``linger_ms=0``): records pile up in the partition's open batch while
  the previous batch is in flight, up to 16 KiB (Kafka's default) and up to 256 KiB
  (pulllog's default: an open batch waits while its partition has one in flight);
* ``send_and_wait()``: one record at a time, each waiting for its acknowledgement;
* ``send_batch()``: message sets of 50 records, one future per set;
* aiokafka's ``send()`` (per-message futures, its defaults, the same batching idea) and
  ``send_and_wait()`` (one record per request).

A second table measures record encoding alone (no I/O), the producer's hot path: building
16 KiB batches of 200-byte records, CRC included, with pulllog's per-record ``append``
(what ``send()`` does), its message-set ``extend`` (``send_batch()``), the log's reference
codec ``build_batch``, aiokafka's builder (a C extension) and kafka-python's (pure Python).

Each row of the first table shows the median and the best of ``--runs`` runs, each on a fresh
broker: on a shared machine the spread is wide, and the best run is the one least disturbed. msgs/s counts from the
first send until every record is acknowledged; MB/s is payload (200 bytes a message);
client CPU is this process's CPU time per message, steadier than wall time on a busy
machine.

    python scripts/bench_client.py [--messages 200000] [--single-messages 10000] [--runs 5]
                                   [--skip-encoding] [--skip-producer]
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiokafka

from pulllog.client.accumulator import ProducerBatch
from pulllog.client.producer import Producer
from pulllog.records import Compression, build_batch

MESSAGE_SIZE = 200
SET_SIZE = 50
TOPIC = "bench"

BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from pulllog.broker import Broker
    async def main():
        async with Broker(data_dir=sys.argv[1], port=int(sys.argv[2])):
            print("ready", flush=True)
            await asyncio.Event().wait()  # until the benchmark terminates this process
    asyncio.run(main())
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="pulllog-bench-client-")
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-c", BROKER, self.tmp.name, str(self.port)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        self.tmp.cleanup()


@dataclass
class Result:
    wall_s: float
    cpu_s: float


Scenario = Callable[[str, int, bytes], Awaitable[None]]


async def pulllog_send(bootstrap: str, n: int, value: bytes, **options: object) -> None:
    options.setdefault("acks", 1)  # the rows' acks (the Producer's own default is "all", idempotent)
    async with Producer(bootstrap, **options) as producer:  # type: ignore[arg-type]
        futures = [await producer.send(TOPIC, value) for _ in range(n)]
        await producer.flush()
    failed = sum(1 for f in futures if f.exception() is not None)
    assert failed == 0, f"{failed} records failed: {next(f.exception() for f in futures if f.exception())}"


async def pulllog_send_and_wait(bootstrap: str, n: int, value: bytes) -> None:
    async with Producer(bootstrap, acks=1) as producer:
        for _ in range(n):
            await producer.send_and_wait(TOPIC, value)


async def pulllog_send_batch(bootstrap: str, n: int, value: bytes) -> None:
    records = [value] * SET_SIZE
    async with Producer(bootstrap, acks=1) as producer:
        futures = [await producer.send_batch(TOPIC, records) for _ in range(n // SET_SIZE)]
        await producer.flush()
    assert all(f.exception() is None for f in futures)


async def aiokafka_send(bootstrap: str, n: int, value: bytes) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
    await producer.start()
    try:
        futures = [await producer.send(TOPIC, value) for _ in range(n)]
        await producer.flush()
    finally:
        await producer.stop()
    assert all(f.exception() is None for f in futures)


async def aiokafka_send_and_wait(bootstrap: str, n: int, value: bytes) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
    await producer.start()
    try:
        for _ in range(n):
            await producer.send_and_wait(TOPIC, value)
    finally:
        await producer.stop()


async def warm_up(bootstrap: str) -> None:
    """Create the topic and load the code paths, outside the timed part."""
    async with Producer(bootstrap) as producer:
        await producer.send_and_wait(TOPIC, b"warm up")


def run_once(scenario: Scenario, n: int) -> Result:
    broker = BrokerProcess()
    try:
        asyncio.run(warm_up(broker.bootstrap))
        value = os.urandom(MESSAGE_SIZE)
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(scenario(broker.bootstrap, n, value))
        return Result(time.perf_counter() - wall, time.process_time() - cpu)
    finally:
        broker.stop()


# ---------------------------------------------------------------------------- encoding only

RECORDS_PER_BATCH = 16384 // (MESSAGE_SIZE + 10)


def encode_with_append(value: bytes, batches: int) -> None:
    loop = asyncio.new_event_loop()
    now = int(time.time() * 1000)
    for _ in range(batches):
        batch = ProducerBatch(TOPIC, 0, now, 0.0, loop)
        for _ in range(RECORDS_PER_BATCH):
            batch.append(None, value, b"\x00", now)
        batch.seal(Compression.NONE, -1, -1, -1)
    loop.close()


def encode_with_extend(value: bytes, batches: int) -> None:
    loop = asyncio.new_event_loop()
    now = int(time.time() * 1000)
    values = [value] * RECORDS_PER_BATCH
    for _ in range(batches):
        batch = ProducerBatch(TOPIC, 0, now, 0.0, loop)
        batch.extend(values, now, None)
        batch.seal(Compression.NONE, -1, -1, -1)
    loop.close()


def encode_with_build_batch(value: bytes, batches: int) -> None:
    now = int(time.time() * 1000)
    records = [(None, value, now)] * RECORDS_PER_BATCH
    for _ in range(batches):
        build_batch(records, timestamp=now)


def _encode_with_builder(builder_class: type, value: bytes, batches: int) -> None:
    now = int(time.time() * 1000)
    for _ in range(batches):
        builder = builder_class(2, 0, 0, -1, -1, -1, 1 << 20)
        for offset in range(RECORDS_PER_BATCH):
            builder.append(offset, timestamp=now, key=None, value=value, headers=[])
        builder.build()


def encode_with_aiokafka(value: bytes, batches: int) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    _encode_with_builder(DefaultRecordBatchBuilder, value, batches)


def encode_with_kafka_python(value: bytes, batches: int) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    _encode_with_builder(DefaultRecordBatchBuilder, value, batches)


def encoding_table(runs: int) -> None:
    encoders = [
        ("pulllog ProducerBatch.append (send)", encode_with_append),
        ("pulllog ProducerBatch.extend (send_batch)", encode_with_extend),
        ("pulllog.log build_batch (reference codec)", encode_with_build_batch),
        ("aiokafka DefaultRecordBatchBuilder (C)", encode_with_aiokafka),
        ("kafka-python DefaultRecordBatchBuilder", encode_with_kafka_python),
    ]
    value = os.urandom(MESSAGE_SIZE)
    batches = 2000
    print(f"\n# record encoding only: {MESSAGE_SIZE}-byte values, no key, no headers, {RECORDS_PER_BATCH} records "
          f"(16 KiB) per batch, uncompressed, CRC included; best of {runs}\n")
    print("| encoder | ns/record | records/s |")
    print("|---|---|---|")
    for name, encode in encoders:
        best = min(_cpu_time(encode, value, batches) for _ in range(runs))
        per_record = best / (batches * RECORDS_PER_BATCH)
        print(f"| {name} | {per_record * 1e9:,.0f} | {1 / per_record:,.0f} |", flush=True)


def _cpu_time(encode: Callable[[bytes, int], None], value: bytes, batches: int) -> float:
    start = time.process_time()
    encode(value, batches)
    return time.process_time() - start


# ---------------------------------------------------------------------------- main


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per batching run")
    parser.add_argument("--single-messages", type=int, default=10_000, help="messages per one-per-request run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-producer", action="store_true", help="only the encoding table")
    parser.add_argument("--skip-encoding", action="store_true", help="only the producer table")
    args = parser.parse_args()

    rows: list[tuple[str, str, str, Scenario, int]] = [
        ("pulllog", "send(), one record per request", "1",
         lambda b, n, v: pulllog_send(b, n, v, batch_size=1), args.single_messages),
        ("pulllog", "send(), one record per request", "0",
         lambda b, n, v: pulllog_send(b, n, v, batch_size=1, acks=0), args.messages),
        ("pulllog", "send_and_wait(), one record per request", "1", pulllog_send_and_wait, args.single_messages),
        ("pulllog", "send(), natural batching (linger 0, 16 KiB)", "1",
         lambda b, n, v: pulllog_send(b, n, v, batch_size=16384), args.messages),
        ("pulllog", "send(), natural batching (linger 0, 256 KiB: the default)", "1",
         lambda b, n, v: pulllog_send(b, n, v, batch_size=256 * 1024), args.messages),
        ("pulllog", f"send_batch(), {SET_SIZE} per set", "1", pulllog_send_batch, args.messages),
        ("aiokafka", "send_and_wait(), one record per request", "1", aiokafka_send_and_wait, args.single_messages),
        ("aiokafka", "send(), natural batching (linger 0, 16 KiB)", "1", aiokafka_send, args.messages),
    ]
    load = os.getloadavg()
    print(f"# {dt.datetime.now():%Y-%m-%d %H:%M}, {cpu_model()}, {os.cpu_count()} cpu(s), {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}, aiokafka {aiokafka.__version__}, "
          f"load average {load[0]:.1f} at start")
    if not args.skip_producer:
        producer_table(rows, args.runs)
    if not args.skip_encoding:
        encoding_table(args.runs)


def producer_table(rows: list[tuple[str, str, str, Scenario, int]], runs: int) -> None:
    print(f"\n# producer: {MESSAGE_SIZE}-byte messages, one partition, broker in its own process, "
          f"{runs} runs each\n")
    print("| client | mode | acks | messages | msgs/s (median) | msgs/s (best) | MB/s (median) "
          "| client CPU µs/msg (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for client, mode, acks, scenario, n in rows:
        results = [run_once(scenario, n) for _ in range(runs)]
        wall = statistics.median(r.wall_s for r in results)
        best = min(r.wall_s for r in results)
        cpu = statistics.median(r.cpu_s for r in results)
        print(f"| {client} | {mode} | {acks} | {n:,} | {n / wall:,.0f} | {n / best:,.0f} | "
              f"{n * MESSAGE_SIZE / wall / 1e6:,.1f} | {cpu / n * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
