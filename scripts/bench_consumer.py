#!/usr/bin/env python3
"""Consumer throughput: pulllog's asyncio Consumer against aiokafka's, 200-byte messages.

Starts ``pulllog serve`` as a separate process, produces N messages of 200 bytes to one
partition per codec with librdkafka (confluent-kafka: linger 5 ms, so batches of a few
hundred records, as a loaded producer makes them), then reads all N from offset 0 several
times with each consumer, in this process, one fresh event loop per run:

- pulllog ``getmany`` (records handed out by the list) and ``async for`` (one at a time);
- aiokafka (0.x, with its Cython record decoder when installed) ``getmany`` and ``async for``;
- pulllog ``getmany`` with prefetch turned off (the next Fetch goes out only once the
  application has read the previous one), to show what prefetch buys;
- librdkafka (C) for reference: what the broker can serve when the client costs little.

Every consumer uses its defaults except: fetch_max_wait 100 ms, max_partition_fetch_bytes
1 MiB, CRC checks on, and the batch APIs hand out 500 records per call (Kafka's
max.poll.records; aiokafka's getmany returns everything buffered by default, which costs it
~60% more CPU per record here, as it does pulllog: thousands of fresh objects at once fall
out of the CPU cache and keep the garbage collector busy). Each run touches every record's
value (``len``), as an application would. MB/s counts the 200-byte values only.

Clients take turns run after run and the best of ``--runs`` is shown (as timeit does: on a
shared machine the slower runs measure the neighbours), with the consumer process's CPU
time per message (user + system, all its threads, best run), which other work on the
machine stretches less than the wall clock.

With ``--rtt-ms`` every client reaches the broker through a proxy process that delays each
direction by half that time, as a broker across a network would; that is where prefetch
(the next Fetch in flight while the application reads) shows.

    python scripts/bench_consumer.py [--messages 500000] [--runs 5] [--codecs none,lz4] [--rtt-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable

import aiokafka
import confluent_kafka

from pulllog.client import fetcher
from pulllog.client.consumer import Consumer
from pulllog.client.types import TopicPartition

VALUE_SIZE = 200
BATCH = 500  # records per getmany / consume call: Kafka's max.poll.records default

# A TCP proxy that delays every chunk by half the round trip, each way, keeping order.
PROXY = textwrap.dedent(
    """
    import asyncio, sys, time
    listen, target, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 2000

    async def pump(reader, writer):
        queue = asyncio.Queue()

        async def deliver():
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(due - time.monotonic())
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.create_task(deliver())
        try:
            while data := await reader.read(1 << 20):
                queue.put_nowait((time.monotonic() + delay, data))
        except ConnectionError:
            pass
        queue.put_nowait(None)
        await task

    async def handle(client_reader, client_writer):
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pump(client_reader, broker_writer), pump(broker_reader, client_writer),
                             return_exceptions=True)

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", listen)
        print("ready", flush=True)
        await server.serve_forever()

    asyncio.run(main())
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: str, port: int, advertised_port: int | None = None) -> subprocess.Popen[bytes]:
    pulllog = shutil.which("pulllog") or os.path.join(os.path.dirname(sys.executable), "pulllog")
    command = [pulllog, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    if advertised_port is not None:
        command += ["--advertised-listener", f"127.0.0.1:{advertised_port}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"pulllog serve exited with {proc.returncode}") from None
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("pulllog serve did not start listening within 30 s")


def start_proxy(port: int, target: int, rtt_ms: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", PROXY, str(port), str(target), str(rtt_ms)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


AGENTS = [b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
          b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15",
          b"curl/8.5.0", b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36"]


def message_value(i: int, rng: random.Random) -> bytes:
    """A 200-byte event, different every time, that compresses about as well as real ones."""
    head = b'{"seq":%d,"user":"user-%05d","page":"/articles/%06d","agent":"%s","trace":"' % (
        i, rng.randrange(100_000), rng.randrange(1_000_000), rng.choice(AGENTS))
    trace = rng.randbytes(VALUE_SIZE).hex().encode()
    return (head + trace)[:VALUE_SIZE - 2] + b'"}'


def produce(bootstrap: str, topic: str, n: int, codec: str) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                                 "compression.type": codec, "queue.buffering.max.messages": 1_000_000})
    rng = random.Random(0)
    for i in range(n):
        value = message_value(i, rng)
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0


# ---------------------------------------------------------------------------- consumers


async def pulllog_getmany(bootstrap: str, topic: str, n: int) -> None:
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0)])
        got = 0
        size = 0
        while got < n:
            for records in (await c.getmany(timeout_ms=1000, max_records=BATCH)).values():
                got += len(records)
                for r in records:
                    size += len(r.value)


async def pulllog_getmany_no_prefetch(bootstrap: str, topic: str, n: int) -> None:
    """What prefetch buys: fetch only once the application has read everything fetched."""
    saved = fetcher.PREFETCH_CHUNKS
    fetcher.PREFETCH_CHUNKS = 1
    try:
        await pulllog_getmany(bootstrap, topic, n)
    finally:
        fetcher.PREFETCH_CHUNKS = saved


async def pulllog_iterate(bootstrap: str, topic: str, n: int) -> None:
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0)])
        got = 0
        size = 0
        async for r in c:
            size += len(r.value)
            got += 1
            if got == n:
                break


def _aiokafka(bootstrap: str) -> aiokafka.AIOKafkaConsumer:
    return aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                     enable_auto_commit=False, fetch_max_wait_ms=100,
                                     max_partition_fetch_bytes=1 << 20, check_crcs=True)


async def aiokafka_getmany(bootstrap: str, topic: str, n: int) -> None:
    c = _aiokafka(bootstrap)
    await c.start()
    try:
        c.assign([aiokafka.TopicPartition(topic, 0)])
        c.seek(aiokafka.TopicPartition(topic, 0), 0)
        got = 0
        size = 0
        while got < n:
            for records in (await c.getmany(timeout_ms=1000, max_records=BATCH)).values():
                got += len(records)
                for r in records:
                    size += len(r.value)
    finally:
        await c.stop()


async def aiokafka_iterate(bootstrap: str, topic: str, n: int) -> None:
    c = _aiokafka(bootstrap)
    await c.start()
    try:
        c.assign([aiokafka.TopicPartition(topic, 0)])
        c.seek(aiokafka.TopicPartition(topic, 0), 0)
        got = 0
        size = 0
        async for r in c:
            size += len(r.value)
            got += 1
            if got == n:
                break
    finally:
        await c.stop()


async def librdkafka(bootstrap: str, topic: str, n: int) -> None:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 1 << 20,
                                  "check.crcs": True,
                                  # else librdkafka pauses fetching for 1 s whenever its queue holds
                                  # 100k messages, which is all this benchmark measures
                                  "fetch.queue.backoff.ms": 10})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    size = 0
    try:
        while got < n:
            for m in c.consume(BATCH, 1.0):
                if m.error() is None:
                    got += 1
                    size += len(m.value())
    finally:
        c.close()


CLIENTS: list[tuple[str, str, Callable[[str, str, int], Awaitable[None]]]] = [
    ("pulllog", f"getmany({BATCH})", pulllog_getmany),
    ("pulllog", "async for", pulllog_iterate),
    ("pulllog, prefetch off", f"getmany({BATCH})", pulllog_getmany_no_prefetch),
    (f"aiokafka {aiokafka.__version__}", f"getmany({BATCH})", aiokafka_getmany),
    (f"aiokafka {aiokafka.__version__}", "async for", aiokafka_iterate),
    (f"librdkafka {confluent_kafka.libversion()[0]}", f"consume({BATCH})", librdkafka),
]


def aiokafka_decoder() -> str:
    try:
        from aiokafka.record import _crecords  # noqa: F401
        return "Cython"
    except ImportError:
        return "pure Python"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--codecs", default="none,lz4", help="comma-separated: none, gzip, snappy, lz4, zstd")
    parser.add_argument("--rtt-ms", type=float, default=0.0,
                        help="talk to the broker through a proxy that adds this round-trip time")
    args = parser.parse_args()
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    data_dir = tempfile.mkdtemp(prefix="pulllog-bench-consumer-")
    port = free_port()
    proxy = None
    if args.rtt_ms > 0:
        proxy_port = free_port()
        proc = start_broker(data_dir, port, advertised_port=proxy_port)
        proxy = start_proxy(proxy_port, port, args.rtt_ms)
        bootstrap = f"127.0.0.1:{proxy_port}"
    else:
        proc = start_broker(data_dir, port)
        bootstrap = f"127.0.0.1:{port}"
    try:
        for codec in codecs:
            produce(bootstrap, f"bench-{codec}", args.messages, codec)
        cpu = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        except (OSError, StopIteration):
            pass
        print(f"# consumer throughput, {dt.date.today()}, {cpu}, {os.cpu_count()} cpu(s), "
              f"Python {platform.python_version()}, {platform.system()} {platform.release()}")
        path = (f"through a proxy adding {args.rtt_ms:g} ms of round trip" if proxy is not None
                else "over loopback")
        print(f"# {args.messages:,} messages of {VALUE_SIZE} bytes (distinct JSON-like events), one partition, "
              f"produced by librdkafka (linger 5 ms); broker: `pulllog serve` in its own process, {path}; "
              f"best of {args.runs} runs; aiokafka record decoder: {aiokafka_decoder()}\n")
        print("| codec | client | API | msgs/s | MB/s (values) | consumer CPU us/msg |")
        print("|---|---|---|---:|---:|---:|")
        for codec in codecs:
            topic = f"bench-{codec}"
            walls: dict[int, list[float]] = {i: [] for i in range(len(CLIENTS))}
            cpus: dict[int, list[float]] = {i: [] for i in range(len(CLIENTS))}
            for _ in range(args.runs):  # clients take turns, so a busy spell hits them all alike
                for i, (_client, _api, run) in enumerate(CLIENTS):
                    start, cpu_start = time.perf_counter(), time.process_time()
                    asyncio.run(asyncio.wait_for(run(bootstrap, topic, args.messages), 600))
                    walls[i].append(time.perf_counter() - start)
                    cpus[i].append(time.process_time() - cpu_start)
            for i, (client, api, _run) in enumerate(CLIENTS):
                wall, cpu_s = min(walls[i]), min(cpus[i])
                print(f"| {codec} | {client} | {api} | {args.messages / wall:,.0f} | "
                      f"{args.messages * VALUE_SIZE / wall / 1e6:,.1f} | {cpu_s / args.messages * 1e6:.2f} |",
                      flush=True)
    finally:
        for child in (proxy, proc):
            if child is not None:
                child.terminate()
                child.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
