#!/usr/bin/env python3
"""The Kafka paper's experiment (section 5) on one machine, against pulllog.

One producer publishes N messages of 200 bytes to a topic of one partition (acks=1), then
one consumer reads N messages with fetches of about 200 KB. Every case runs ``--runs``
times (clients and cases take turns, so a busy spell on a shared machine hits them all
alike), against one broker started by this script in its own process (``pulllog serve``'s
Broker; ``--broker-loop uvloop`` runs it on uvloop; ``--client-loop uvloop`` runs pulllog's
client on uvloop, the application's choice of loop; ``--broker-path DIR`` runs the broker with
``PYTHONPATH=DIR``, another source tree's broker against this client).

Producer cases, each with pulllog's asyncio client, librdkafka (confluent-kafka) and
aiokafka (the pure-Python reference):

* **batch 1**: every message is its own batch, so its own Produce request (the paper's
  "batch size 1": all overhead). pulllog: ``send()`` with ``batch_size=1``; librdkafka:
  ``batch.num.messages=1``; aiokafka: ``create_batch()`` + ``send_batch()`` of one message.
  aiokafka keeps one request per partition in flight; pulllog pipelines 5 (``max_in_flight``,
  the Java client's default); librdkafka up to 1,000,000 (its default
  ``max.in.flight.requests.per.connection`` without idempotence). ``--max-in-flight N``
  gives pulllog and librdkafka the same window (aiokafka has no such setting): with each
  client's default the case compares windows of 5 and 1,000,000 as much as clients.
* **batch 50**: message sets of 50 (the paper's "batch size 50"), one set per request.
  pulllog: ``send_batch()`` of 50 values with ``batch_size=1`` (each set is a batch);
  librdkafka: ``batch.num.messages=50``, ``linger.ms=5``; aiokafka: ``create_batch()`` of 50.
* **natural**: per-message ``send()`` with each client's defaults (pulllog: linger 0, up to
  256 KiB batches; aiokafka: linger 0, 16 KiB; librdkafka: linger 5 ms, up to 1 MB):
  records pile up in a partition's open batch while the previous one is in flight.
* **sets of 50** (pulllog only): ``send_batch()`` of 50 values with the producer's
  defaults, so sets pile up into one batch while the previous one is in flight: the
  batch API as an application would use it (more than 50 records per request).

Consumers (pulllog ``getmany(500)``, librdkafka ``consume(500)``, aiokafka
``getmany(max_records=500)``) each read the same N-message topic, written once in sets of
50, from offset 0 with ``fetch.max.bytes = max.partition.fetch.bytes = 204800``.

Reported, per case: messages/s and MB/s (200-byte values, 10^6 bytes) as median and range
over the runs, counted from the first send to the last acknowledgement; broker CPU
(user + system of the broker process, from /proc) per million messages and per request
(each run's line also splits it into user and system and counts the broker's context switches)
(requests = batches here: one partition, one batch per request), which is steadier than
wall-clock throughput on a shared machine; the log's bytes on disk per message (.log, and
with the sparse .index / .timeindex files) next to the paper's 9 bytes of overhead per
message. The v2 format's own floor for a 200-byte unkeyed record in a batch of 50 is
about 10 bytes (a 61-byte batch header shared by 50, plus ~9 bytes of record framing).

Writes ``results.md`` (the tables), ``results.json`` (every run) and ``producer.png`` /
``consumer.png`` (throughput over MB sent / consumed, the paper's Figures 4 and 5) into
``--out`` (default ``bench-out/``).

    python scripts/bench_paper.py [--messages 200000] [--batch1-messages 20000] [--runs 3]
                                  [--clients pulllog,librdkafka,aiokafka] [--broker-loop asyncio|uvloop]
                                  [--client-loop asyncio|uvloop] [--broker-path DIR]
                                  [--cases "batch 1,batch 50,natural,sets of 50,consume"]
                                  [--out bench-out]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiokafka
import bench_broker_request  # the /proc readers, shared (this directory is on sys.path)
import confluent_kafka

from pulllog.client.admin import Admin
from pulllog.client.consumer import Consumer
from pulllog.client.producer import Producer
from pulllog.client.types import TopicPartition
from pulllog.records.decoding import IMPLEMENTATION as RECORD_DECODER

VALUE_SIZE = 200
SET_SIZE = 50
FETCH_BYTES = 204_800
POLL_RECORDS = 500
SAMPLES = 60  # points per throughput curve
CLIENTS = ("pulllog", "librdkafka", "aiokafka")
CASES = ("batch 1", "batch 50", "natural", "sets of 50")
# --max-in-flight: Produce requests in flight per connection for pulllog and librdkafka (None: their defaults)
MAX_IN_FLIGHT: int | None = None
ONLY = {"sets of 50": ("pulllog",)}  # cases not every client has

BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from pulllog.broker import Broker
    async def main():
        async with Broker(data_dir=sys.argv[1], port=int(sys.argv[2])):
            print("ready", flush=True)
            await asyncio.Event().wait()  # until the benchmark terminates this process
    loop_factory = None
    if sys.argv[3] == "uvloop":
        import uvloop
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    """
)


# ---------------------------------------------------------------------------- the broker


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a measured run's topic, so the page cache it held is free before the next run
    writes (pulllog removes the files before it answers; Kafka after file.delete.delay.ms). On
    this VM a run that needs fresh pages past the ~1 GiB the guest keeps backed pays about ten
    times more kernel time per byte written (the balloon's free page reporting hands the rest
    back to the host), so with every topic kept a series ran slower with every run, whichever
    client wrote."""
    async def delete() -> None:
        async with Admin(bootstrap) as admin:
            await admin.delete_topics([topic])
    asyncio.run(delete())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --pin: the CPUs the broker's process runs on (None: wherever the scheduler puts it)
BROKER_CPUS: set[int] | None = None


def pin(broker_cpu: int = 1, client_cpu: int = 0) -> None:
    """``--pin``: the benchmark's own process (the clients, librdkafka's threads too: they
    inherit it) on ``client_cpu`` and every broker started after this on ``broker_cpu``, as
    the paper's producer and broker ran on separate machines. Call before any thread starts."""
    global BROKER_CPUS
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    os.sched_setaffinity(0, {client_cpu})
    BROKER_CPUS = {broker_cpu}


def broker_prefix() -> list[str]:
    """What a broker's command starts with to run on ``BROKER_CPUS`` (``taskset``; nothing
    when not pinned). A command, not a ``preexec_fn``: those are unsafe once threads run."""
    if BROKER_CPUS is None:
        return []
    return ["taskset", "-c", ",".join(map(str, sorted(BROKER_CPUS)))]


def pinned() -> str:
    """The header's words for the CPUs (empty when not pinned)."""
    if BROKER_CPUS is None:
        return ""
    return f"; pinned: clients on CPU {sorted(os.sched_getaffinity(0))}, broker on CPU {sorted(BROKER_CPUS)}"


class BrokerProcess:
    def __init__(self, data_dir: Path, loop: str, path: str | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        env = None
        if path is not None:  # --broker-path: the broker's code from another source tree than the client's
            env = {**os.environ, "PYTHONPATH": path}
        self.proc = subprocess.Popen([*broker_prefix(), sys.executable, "-c", BROKER, str(data_dir), str(self.port), loop],
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the broker did not start")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """User + system CPU of the broker process so far."""
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the broker process so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def context_switches(self) -> tuple[int, int]:
        """(voluntary, involuntary) context switches of the broker's threads so far."""
        return bench_broker_request.context_switches(self.proc.pid)

    def storage(self, topic: str) -> tuple[int, int, int, int]:
        """(bytes in .log files, bytes in index files, batches, records) of partition 0."""
        directory = self.data_dir / f"{topic}-0"
        log_bytes = index_bytes = batches = records = 0
        for path in sorted(directory.iterdir()):
            if path.suffix == ".log":
                data = path.read_bytes()
                log_bytes += len(data)
                pos = 0
                while pos + 61 <= len(data):
                    (length,) = struct.unpack_from(">i", data, pos + 8)
                    (count,) = struct.unpack_from(">i", data, pos + 57)
                    batches += 1
                    records += count
                    pos += 12 + length
            elif path.suffix in (".index", ".timeindex"):
                index_bytes += path.stat().st_size
        return log_bytes, index_bytes, batches, records

    def delete_topic(self, topic: str) -> None:
        """:func:`delete_topic`, then wait until the topic's directory is gone."""
        delete_topic(self.bootstrap, topic)
        directory = self.data_dir / f"{topic}-0"
        deadline = time.monotonic() + 60
        while directory.exists() or any(self.data_dir.glob(f"{topic}-0.*")):
            if time.monotonic() > deadline:
                raise SystemExit(f"the broker did not remove {directory} within 60 s of DeleteTopics")
            time.sleep(0.01)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# ---------------------------------------------------------------------------- measuring


class Curve:
    """(seconds since start, messages done) samples; a producer or consumer calls ``mark``."""

    def __init__(self, n: int) -> None:
        self.every = max(1, n // SAMPLES)
        self.points: list[tuple[float, int]] = []
        self.start = time.perf_counter()

    def begin(self) -> None:
        self.start = time.perf_counter()
        self.points = [(0.0, 0)]

    def mark(self, done: int) -> None:
        if self.points and self.points[-1][1] >= done:
            return  # the final mark after the last sample: nothing new
        self.points.append((time.perf_counter() - self.start, done))

    def throughput(self, window: int = 4) -> list[tuple[float, float]]:
        """(MB done, msgs/s over the last ``window`` intervals) per sample: acknowledgements
        come in bursts (a whole batch at once), so single intervals would zigzag."""
        out = []
        for (t0, n0), (t1, n1) in zip(self.points, self.points[window:]):
            if t1 > t0 and n1 > n0:
                out.append((n1 * VALUE_SIZE / 1e6, (n1 - n0) / (t1 - t0)))
        return out


@dataclass
class Run:
    client: str
    case: str
    run: int
    messages: int
    seconds: float
    broker_cpu_s: float
    log_bytes: int = 0
    index_bytes: int = 0
    batches: int = 0
    curve: list[tuple[float, float]] = field(default_factory=list)
    client_cpu_s: float = 0.0  # this process (the client, librdkafka's threads included)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds


# ---------------------------------------------------------------------------- producers


def _ack_every(curve: Curve, k: int) -> Callable[..., None]:
    """A done-callback (or librdkafka delivery report) for every k-th message: one partition
    acknowledges in order, so the k-th acknowledged means the first k are."""
    return lambda *_: curve.mark(k)


async def pulllog_produce(bootstrap: str, topic: str, n: int, case: str, curve: Curve) -> None:
    value = os.urandom(VALUE_SIZE)
    options: dict[str, int] = {"batch_size": 1} if case in ("batch 1", "batch 50") else {}  # 1: each send is its own batch
    if MAX_IN_FLIGHT is not None:
        options["max_in_flight"] = MAX_IN_FLIGHT
    async with Producer(bootstrap, acks=1, client_id="bench-paper", **options) as producer:  # type: ignore[arg-type]
        await producer.partitions_for(topic)
        curve.begin()
        if case in ("batch 50", "sets of 50"):
            records = [value] * SET_SIZE
            for i in range(n // SET_SIZE):
                acked = await producer.send_batch(topic, records, partition=0)
                if (i + 1) * SET_SIZE % curve.every < SET_SIZE:
                    acked.add_done_callback(_ack_every(curve, (i + 1) * SET_SIZE))
        else:
            every = curve.every
            for i in range(1, n + 1):
                future = await producer.send(topic, value, partition=0)
                if i % every == 0:
                    future.add_done_callback(_ack_every(curve, i))
        await producer.flush()
    curve.mark(n)


def librdkafka_produce(bootstrap: str, topic: str, n: int, case: str, curve: Curve) -> None:
    value = os.urandom(VALUE_SIZE)
    config = {"bootstrap.servers": bootstrap, "acks": 1, "queue.buffering.max.messages": 1_000_000,
              "client.id": "bench-paper"}
    if MAX_IN_FLIGHT is not None:
        config["max.in.flight.requests.per.connection"] = MAX_IN_FLIGHT
    if case == "batch 1":
        config.update({"batch.num.messages": 1, "linger.ms": 0})
    elif case == "batch 50":
        config.update({"batch.num.messages": SET_SIZE, "linger.ms": 5})
    producer = confluent_kafka.Producer(config)
    producer.list_topics(topic, timeout=10)
    every = curve.every
    curve.begin()
    for i in range(1, n + 1):
        while True:
            try:
                if i % every == 0:  # a delivery report for every k-th message: one partition acks in order
                    producer.produce(topic, value, partition=0, on_delivery=_ack_every(curve, i))
                    producer.poll(0)
                else:
                    producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0, "librdkafka could not deliver everything"
    curve.mark(n)


async def aiokafka_produce(bootstrap: str, topic: str, n: int, case: str, curve: Curve) -> None:
    value = os.urandom(VALUE_SIZE)
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, client_id="bench-paper")
    await producer.start()
    try:
        await producer.partitions_for(topic)
        curve.begin()
        every = curve.every
        if case == "natural":
            for i in range(1, n + 1):
                future = await producer.send(topic, value, partition=0)
                if i % every == 0:
                    future.add_done_callback(_ack_every(curve, i))
        else:
            size = 1 if case == "batch 1" else SET_SIZE
            for i in range(1, n // size + 1):
                batch = producer.create_batch()
                for _ in range(size):
                    batch.append(key=None, value=value, timestamp=None)
                batch.close()
                future = await producer.send_batch(batch, topic, partition=0)
                if i * size % every < size:
                    future.add_done_callback(_ack_every(curve, i * size))
        await producer.flush()
    finally:
        await producer.stop()
    curve.mark(n)


# ---------------------------------------------------------------------------- consumers


async def pulllog_consume(bootstrap: str, topic: str, n: int, curve: Curve) -> None:
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_bytes=FETCH_BYTES,
                        max_partition_fetch_bytes=FETCH_BYTES, client_id="bench-paper") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = size = 0
        curve.begin()
        next_mark = curve.every
        while got < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=POLL_RECORDS)).values():
                got += len(records)
                for r in records:
                    size += len(r.value or b"")
            if got >= next_mark:
                curve.mark(got)
                next_mark += curve.every
    curve.mark(got)


def librdkafka_consume(bootstrap: str, topic: str, n: int, curve: Curve) -> None:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-paper", "enable.auto.commit": False,
        "fetch.max.bytes": FETCH_BYTES, "max.partition.fetch.bytes": FETCH_BYTES, "message.max.bytes": FETCH_BYTES,
        "fetch.queue.backoff.ms": 10})  # else it pauses fetching for 1 s whenever 100k messages are queued
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = size = 0
    curve.begin()
    next_mark = curve.every
    try:
        while got < n:
            for m in consumer.consume(POLL_RECORDS, 1.0):
                if m.error() is None:
                    got += 1
                    size += len(m.value() or b"")
            if got >= next_mark:
                curve.mark(got)
                next_mark += curve.every
    finally:
        consumer.close()
    curve.mark(got)


async def aiokafka_consume(bootstrap: str, topic: str, n: int, curve: Curve) -> None:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                         fetch_max_bytes=FETCH_BYTES, max_partition_fetch_bytes=FETCH_BYTES,
                                         client_id="bench-paper")
    await consumer.start()
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = size = 0
        curve.begin()
        next_mark = curve.every
        while got < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=POLL_RECORDS)).values():
                got += len(records)
                for r in records:
                    size += len(r.value or b"")
            if got >= next_mark:
                curve.mark(got)
                next_mark += curve.every
    finally:
        await consumer.stop()
    curve.mark(got)


PRODUCERS = {"pulllog": pulllog_produce, "librdkafka": librdkafka_produce, "aiokafka": aiokafka_produce}
CONSUMERS = {"pulllog": pulllog_consume, "librdkafka": librdkafka_consume, "aiokafka": aiokafka_consume}


def call(fn: Callable[..., object], *args: object, loop: str = "asyncio") -> None:
    result = fn(*args)
    if asyncio.iscoroutine(result):
        loop_factory = None
        if loop == "uvloop":
            import uvloop
            loop_factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(asyncio.wait_for(result, 600))


# ---------------------------------------------------------------------------- the experiment


def run_all(args: argparse.Namespace, broker: BrokerProcess, clients: list[str]) -> list[Run]:
    runs: list[Run] = []
    source = "paper-consume"
    consume = "consume" in args.cases
    if consume:
        call(pulllog_produce, broker.bootstrap, source, args.messages, "batch 50", Curve(args.messages))
    for run in range(args.runs):
        for client in clients:
            for case in CASES:
                if client not in ONLY.get(case, CLIENTS) or case not in args.cases:
                    continue
                n = args.batch1_messages if case == "batch 1" else args.messages
                topic = f"{client}-{case.replace(' ', '')}-{run}"
                curve = Curve(n)
                user, system = broker.cpu_split()
                switches = broker.context_switches()
                client_cpu = time.process_time()
                started = time.perf_counter()
                call(PRODUCERS[client], broker.bootstrap, topic, n, case, curve,
                     loop=args.client_loop if client == "pulllog" else "asyncio")
                seconds = time.perf_counter() - started if not curve.points else curve.points[-1][0]
                client_cpu = time.process_time() - client_cpu
                user2, system2 = broker.cpu_split()
                user, system = user2 - user, system2 - system
                cpu = user + system
                voluntary, involuntary = (b - a for a, b in zip(switches, broker.context_switches()))
                log_bytes, index_bytes, batches, records = broker.storage(topic)
                assert records == n, f"{client} {case}: {records} records on disk, expected {n}"
                if not args.keep_topics:
                    broker.delete_topic(topic)
                runs.append(Run(client, case, run, n, seconds, cpu, log_bytes, index_bytes, batches,
                                curve.throughput(), client_cpu))
                print(f"  run {run + 1}: {client:10} produce {case:8} {n / seconds:>10,.0f} msgs/s  "
                      f"broker {cpu / n * 1e6:6.2f} s per M  client {client_cpu / n * 1e6:6.2f} s per M  "
                      f"{n / batches:6.1f} msgs/request; broker per request: user {user / batches * 1e6:.1f} "
                      f"system {system / batches * 1e6:.1f} µs, context switches {voluntary / batches:.2f} "
                      f"voluntary {involuntary / batches:.2f} involuntary", file=sys.stderr, flush=True)
            if not consume:
                continue
            curve = Curve(args.messages)
            cpu = broker.cpu_seconds()
            client_cpu = time.process_time()
            call(CONSUMERS[client], broker.bootstrap, source, args.messages, curve,
                 loop=args.client_loop if client == "pulllog" else "asyncio")
            client_cpu = time.process_time() - client_cpu
            cpu = broker.cpu_seconds() - cpu
            runs.append(Run(client, "consume", run, args.messages, curve.points[-1][0], cpu,
                            curve=curve.throughput(), client_cpu_s=client_cpu))
            print(f"  run {run + 1}: {client:10} consume {'':8} {runs[-1].msgs_per_s:>10,.0f} msgs/s  "
                  f"broker {cpu / args.messages * 1e6:6.2f} s per M  client {client_cpu / args.messages * 1e6:6.2f} "
                  "s per M", file=sys.stderr, flush=True)
    return runs


def _median_run(runs: list[Run]) -> Run:
    ordered = sorted(runs, key=lambda r: r.msgs_per_s)
    return ordered[len(ordered) // 2]


def tables(runs: list[Run], clients: list[str], header: str) -> str:
    lines = [header, "",
             "## Producer: 200-byte messages, one partition, acks=1", "",
             ("| client | case | msgs/s (median) | range | MB/s | records / request | broker CPU s per M msgs "
              "| broker CPU µs per request | client CPU s per M msgs | disk bytes / msg (.log) | overhead bytes / msg (+ indexes) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for client in clients:
        for case in CASES:
            group = [r for r in runs if r.client == client and r.case == case]
            if not group:
                continue
            rates = [r.msgs_per_s for r in group]
            mid = _median_run(group)
            cpu = statistics.median(r.broker_cpu_s for r in group)
            client_cpu = statistics.median(r.client_cpu_s for r in group)
            n = mid.messages
            per_msg = mid.log_bytes / n
            overhead = (mid.log_bytes + mid.index_bytes) / n - VALUE_SIZE
            lines.append(
                f"| {client} | {case} | {statistics.median(rates):,.0f} | {min(rates):,.0f}–{max(rates):,.0f} | "
                f"{statistics.median(rates) * VALUE_SIZE / 1e6:,.1f} | {n / mid.batches:,.1f} | "
                f"{cpu / n * 1e6:.2f} | {cpu / mid.batches * 1e6:,.1f} | {client_cpu / n * 1e6:.2f} | {per_msg:.1f} | {overhead:.1f} |")
    consumed = next((r.messages for r in runs if r.case == "consume"), 0)
    lines += ["", (f"## Consumer: the same {consumed:,} messages (batches of 50), "
                   f"fetches of {FETCH_BYTES:,} bytes, {POLL_RECORDS} records per poll"), "",
              "| client | msgs/s (median) | range | MB/s | broker CPU s per M msgs |", "|---|---:|---:|---:|---:|"]
    for client in clients:
        group = [r for r in runs if r.client == client and r.case == "consume"]
        if not group:
            continue
        rates = [r.msgs_per_s for r in group]
        cpu = statistics.median(r.broker_cpu_s for r in group)
        lines.append(f"| {client} | {statistics.median(rates):,.0f} | {min(rates):,.0f}–{max(rates):,.0f} | "
                     f"{statistics.median(rates) * VALUE_SIZE / 1e6:,.1f} | {cpu / group[0].messages * 1e6:.2f} |")
    lines += ["", "## Ratios (medians)", ""]

    def med(client: str, case: str) -> float | None:
        group = [r.msgs_per_s for r in runs if r.client == client and r.case == case]
        return statistics.median(group) if group else None

    for case in ("batch 1", "natural", "batch 50", "consume"):
        ours, ref = med("pulllog", case), med("aiokafka", case)
        if ours and ref:
            lines.append(f"- pulllog / aiokafka, {case}: {ours / ref:.2f}x")
    for case in ("batch 50", "sets of 50"):
        rate = med("pulllog", case)
        if rate:
            lines.append(f"- pulllog send_batch(50), {case}: {rate:,.0f} msgs/s = {rate / 400_000:.2f}x the paper's 400,000")
    return "\n".join(lines) + "\n"


def plots(runs: list[Run], clients: list[str], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[bench]'): no plots", file=sys.stderr)
        return []
    styles = {"pulllog": "tab:blue", "librdkafka": "tab:orange", "aiokafka": "tab:green"}
    dashes = {"batch 1": ":", "batch 50": "-", "natural": "--", "sets of 50": "-.", "consume": "-"}
    written = []
    for name, cases, title, xlabel in (
        ("producer.png", CASES, "Producer performance (cf. the paper's Figure 4)", "MB sent"),
        ("consumer.png", ("consume",), "Consumer performance (cf. the paper's Figure 5)", "MB consumed"),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        for client in clients:
            for case in cases:
                group = [r for r in runs if r.client == client and r.case == case]
                if not group:
                    continue
                curve = _median_run(group).curve
                if curve:
                    xs, ys = zip(*curve)
                    label = client if case == "consume" else f"{client}, {case}"
                    ax.plot(xs, ys, dashes[case], color=styles.get(client), label=label)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("throughput (messages/sec)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0]
    return (f"{dt.datetime.now():%Y-%m-%d %H:%M}, {cpu}, {os.cpu_count()} cpu(s), {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, librdkafka {confluent_kafka.libversion()[0]}, "
            f"aiokafka {aiokafka.__version__}, pulllog's record decoder: {RECORD_DECODER} (see pulllog.records.decoding), "
            f"load average {load:.1f} at start{pinned()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per batch-50, natural and consume run")
    parser.add_argument("--batch1-messages", type=int, default=20_000, help="messages per batch-1 run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--cases", default=",".join((*CASES, "consume")),
                        help="comma-separated cases to run (default: all): " + ", ".join((*CASES, "consume")))
    parser.add_argument("--broker-loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--client-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="the event loop pulllog's client runs on (aiokafka stays on asyncio's)")
    parser.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                        help="Produce requests in flight per connection for pulllog (max_in_flight) and librdkafka "
                             "(max.in.flight.requests.per.connection); default: each client's own (5; 1,000,000)")
    parser.add_argument("--pin", action="store_true",
                        help="clients on CPU 0, the broker on CPU 1 (the paper's separate machines; "
                             "default: wherever the scheduler puts them)")
    parser.add_argument("--broker-path", metavar="DIR", default=None,
                        help="run the broker with PYTHONPATH=DIR (another source tree's broker against this "
                             "client: A/B a broker change with the client unchanged)")
    parser.add_argument("--keep-topics", action="store_true",
                        help="keep each run's topic (default: deleted once measured, so every run starts "
                             "with the same free memory; see BrokerProcess.delete_topic)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    if args.pin:
        pin()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown client(s) {', '.join(sorted(unknown))}; choose from {', '.join(CLIENTS)}")
    args.cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    unknown = args.cases - {*CASES, "consume"}
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}; choose from {', '.join((*CASES, 'consume'))}")
    args.messages -= args.messages % SET_SIZE
    if args.max_in_flight is not None:
        if args.max_in_flight < 1:
            parser.error("--max-in-flight must be at least 1")
        global MAX_IN_FLIGHT
        MAX_IN_FLIGHT = args.max_in_flight
    window = ("each client's default in-flight window" if MAX_IN_FLIGHT is None
              else f"{MAX_IN_FLIGHT:,} Produce requests in flight for pulllog and librdkafka")
    args.out.mkdir(parents=True, exist_ok=True)
    header = (f"# The paper's experiment on one machine\n\n{machine()}; broker: pulllog in its own process "
              f"({args.broker_loop} event loop{'' if args.broker_path is None else ', from ' + args.broker_path}); "
              f"pulllog's client on {args.client_loop}'s event loop; "
              f"{args.runs} runs per case; {args.messages:,} messages per run "
              f"({args.batch1_messages:,} for batch 1); {window}")
    print(header.replace("\n\n", "\n"), file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="pulllog-bench-paper-") as tmp:
        broker = BrokerProcess(Path(tmp), args.broker_loop, args.broker_path)
        try:
            runs = run_all(args, broker, clients)
        finally:
            broker.stop()
    text = tables(runs, clients, header)
    (args.out / "results.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    written = plots(runs, clients, args.out)
    print(text)
    print(f"wrote {args.out / 'results.md'}, {args.out / 'results.json'}"
          + "".join(f", {p}" for p in written), file=sys.stderr)


if __name__ == "__main__":
    main()
