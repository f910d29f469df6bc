"""``pulllog perf produce|consume``: Kafka's perf-test tools, for pulllog's client or librdkafka.

    pulllog perf produce TOPIC --num-records 1000000 --record-size 200 [--throughput 50000]
                         [--acks 1] [--batch-size 16384] [--linger-ms 0] [--compression lz4]
                         [--client pulllog|librdkafka]
    pulllog perf consume TOPIC --messages 1000000 [--fetch-max-bytes 204800]
                         [--client pulllog|librdkafka]

Like ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``: a live progress line on
stderr while it runs, then one row on stdout: records, msgs/s, MB/s (10^6 bytes of keys and
values a second) and latency avg / p50 / p99 / p99.9 / max in milliseconds. ``--json``
prints the same as one JSON object, for scripts.

* **produce**: every record is ``--record-size`` bytes of random letters (one payload
  reused, as Kafka's tool does), no key, sent with ``send()`` one at a time and counted
  when acknowledged. Latency is send to acknowledgement, per record. The clock runs from
  the first send until the last acknowledgement. ``--throughput`` caps msgs/s (-1: as fast
  as the client goes). pulllog's client sends from this process's event loop; librdkafka
  from its own threads, with ``--batch-size`` / ``--linger-ms`` as its ``batch.size`` /
  ``linger.ms``.
* **consume**: reads ``--messages`` records from the beginning of every partition of the
  topic (assigned, no consumer group), ``--fetch-max-bytes`` per Fetch (and per
  partition, up to 1 MiB). Latency is the wait per poll (``getmany()`` / ``consume()``)
  that returned records: how long the application waited for each helping of data.

Exit codes: 0; 1 when records failed, the broker is unreachable, or the topic runs out
before ``--messages`` (after ``--timeout-ms`` without a record); 2 for bad usage.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import string
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..client.consumer import Consumer
from ..client.producer import Producer, RecordFuture
from ..client.types import TopicPartition
from .common import bootstrap_server_option, console, run_async
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["PerfResult", "perf", "summarize"]

_CLIENTS = ("pulllog", "librdkafka")
_PROGRESS_STEPS = 200  # progress updates per run: often enough to look live, rare enough to cost nothing


@dataclass(frozen=True)
class PerfResult:
    """What a run measured; ``latency_ms`` summarizes one sample per record (produce) or poll (consume)."""

    client: str
    records: int
    bytes: int
    seconds: float
    latency_ms: dict[str, float]
    errors: int = 0
    first_error: str | None = None

    @property
    def msgs_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"client": self.client, "records": self.records, "bytes": self.bytes,
                "seconds": round(self.seconds, 6), "msgs_per_s": round(self.msgs_per_s, 1),
                "mb_per_s": round(self.mb_per_s, 3), "latency_ms": self.latency_ms, "errors": self.errors}


def summarize(latencies_ms: list[float]) -> dict[str, float]:
    """avg, p50, p99, p99.9 and max, as Kafka's perf tool picks them (index count * pct)."""
    if not latencies_ms:
        return {"avg": 0.0, "p50": 0.0, "p99": 0.0, "p99.9": 0.0, "max": 0.0}
    ordered = sorted(latencies_ms)
    n = len(ordered)

    def pct(p: float) -> float:
        return round(ordered[min(n - 1, int(n * p))], 3)

    return {"avg": round(sum(ordered) / n, 3), "p50": pct(0.5), "p99": pct(0.99), "p99.9": pct(0.999),
            "max": round(ordered[-1], 3)}


@click.group(epilog=examples(
    "pulllog perf produce bench --num-records 1000000 --record-size 200",
    "pulllog perf consume bench --messages 1000000",
))
def perf() -> None:
    """Measure produce and consume throughput and latency (like Kafka's perf-test tools)."""


# ---------------------------------------------------------------------------- progress


@contextmanager
def _progress(what: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """A live line on stderr; yields ``update(records, bytes)``."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=False)
    task = progress.add_task(what, total=total, rate="")
    start = time.perf_counter()

    def update(records: int, size: int) -> None:
        elapsed = time.perf_counter() - start
        rate = f"{records / elapsed:,.0f} msgs/s {size / elapsed / 1e6:,.1f} MB/s" if elapsed > 0 else ""
        progress.update(task, completed=records, rate=rate)

    with progress:
        yield update


def _report(kind: str, topic: str, result: PerfResult, as_json: bool, settings: str) -> None:
    if as_json:
        click.echo(json.dumps({"command": kind, "topic": topic, **result.as_json()}))
    else:
        lat = result.latency_ms
        out = console()
        out.print(f"{kind} {topic} with {result.client}: {settings}", soft_wrap=True)
        table = Table(box=None, pad_edge=False)
        for name in ("records", "msgs/s", "MB/s", "avg ms", "p50 ms", "p99 ms", "p99.9 ms", "max ms"):
            table.add_column(name, justify="right")
        table.add_row(f"{result.records:,}", f"{result.msgs_per_s:,.0f}", f"{result.mb_per_s:,.2f}",
                      *(f"{lat[k]:,.2f}" for k in ("avg", "p50", "p99", "p99.9", "max")))
        out.print(table)
    if result.errors:
        raise CliError(f"{result.errors} of {result.records + result.errors} record(s) failed; "
                       f"the first: {result.first_error}", EXIT_PROBLEM)


# ---------------------------------------------------------------------------- produce


@perf.command(epilog=examples(
    "pulllog perf produce bench --num-records 1000000 --record-size 200",
    "pulllog perf produce bench --num-records 100000 --record-size 1000 --throughput 20000 --acks 1 --json",
    "pulllog perf produce bench --num-records 1000000 --record-size 200 --client librdkafka --compression lz4",
))
@click.argument("topic")
@click.option("--num-records", type=int, required=True, help="Records to send.")
@click.option("--record-size", type=int, required=True, help="Bytes per record (the value; no key).")
@click.option("--throughput", type=float, default=-1, show_default=True,
              help="Cap in records/s; -1 sends as fast as the client can.")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True,
              help="1 as in the paper's runs (not the clients' default 'all'); with 'all' pulllog's "
                   "producer is idempotent (librdkafka's is not unless configured so).")
@click.option("--batch-size", type=int, default=None,
              help="Bytes per batch (batch.size). Default: the client's own (pulllog 256 KiB, librdkafka 1 MB).")
@click.option("--linger-ms", type=float, default=0, show_default=True, help="linger.ms")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none",
              show_default=True)
@click.option("--client", type=click.Choice(_CLIENTS), default="pulllog", show_default=True,
              help="pulllog's asyncio Producer, or librdkafka (confluent-kafka).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@bootstrap_server_option
def produce(topic: str, num_records: int, record_size: int, throughput: float, acks: str, batch_size: int | None,
            linger_ms: float, compression: str, client: str, as_json: bool, bootstrap_server: str) -> None:
    """Send --num-records records of --record-size bytes to TOPIC; report rate and latency."""
    if num_records < 1:
        raise CliError(f"--num-records {num_records}: send at least 1", EXIT_USAGE)
    if record_size < 0:
        raise CliError(f"--record-size {record_size}: must be >= 0", EXIT_USAGE)
    if batch_size is not None and batch_size < 1:
        raise CliError(f"--batch-size {batch_size}: must be >= 1", EXIT_USAGE)
    if linger_ms < 0:
        raise CliError(f"--linger-ms {linger_ms}: must be >= 0", EXIT_USAGE)
    payload = "".join(random.choices(string.ascii_uppercase, k=record_size)).encode()
    settings = (f"{record_size}-byte records, acks={acks}, batch.size={batch_size or 'default'}, "
                f"linger.ms={linger_ms:g}, "
                f"compression={compression}" + (f", throughput cap {throughput:,.0f}/s" if throughput > 0 else ""))
    with _progress(f"produce {topic}", num_records) as update:
        if client == "pulllog":
            result = run_async(_produce_pulllog, bootstrap_server, topic, payload, num_records, throughput,
                               acks, batch_size, linger_ms, compression, update)
        else:
            result = _produce_librdkafka(bootstrap_server, topic, payload, num_records, throughput, acks,
                                         batch_size, linger_ms, compression, update)
    _report("produce", topic, result, as_json, settings)


class _Acks:
    """Counts acknowledgements and keeps each record's latency (a done-callback per record)."""

    __slots__ = ("errors", "first_error", "latencies")

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error: str | None = None

    def done(self, sent_at: float, future: RecordFuture) -> None:
        if future.cancelled() or future.exception() is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = "cancelled" if future.cancelled() else str(future.exception())
        else:
            self.latencies.append((time.perf_counter() - sent_at) * 1000)


async def _produce_pulllog(bootstrap: str, topic: str, payload: bytes, n: int, cap: float, acks: str,
                           batch_size: int | None, linger_ms: float, compression: str,
                           update: Callable[[int, int], None]) -> PerfResult:
    clock = time.perf_counter
    acked = _Acks()
    step = max(1, n // _PROGRESS_STEPS)
    size = len(payload)
    options: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    async with Producer(bootstrap, client_id="pulllog-perf", acks=acks, linger_ms=linger_ms,
                        compression=None if compression == "none" else compression, **options) as producer:
        await producer.partitions_for(topic)  # metadata (and auto-creation) outside the clock
        done = acked.done
        send = producer.send
        start = clock()
        for i in range(n):
            sent_at = clock()
            future = await send(topic, payload)
            future.add_done_callback(functools.partial(done, sent_at))
            if cap > 0 and i + 1 > cap * (sent_at - start):
                await asyncio.sleep(max(0.0, (i + 1) / cap - (clock() - start)))
            if i % step == 0:
                update(len(acked.latencies), len(acked.latencies) * size)
        await producer.flush()
        await asyncio.sleep(0)  # the last done-callbacks run
        elapsed = clock() - start
    ok = len(acked.latencies)
    update(ok, ok * size)
    return PerfResult("pulllog", ok, ok * size, elapsed, summarize(acked.latencies), acked.errors, acked.first_error)


def _produce_librdkafka(bootstrap: str, topic: str, payload: bytes, n: int, cap: float, acks: str,
                        batch_size: int | None, linger_ms: float, compression: str,
                        update: Callable[[int, int], None]) -> PerfResult:
    confluent_kafka = _confluent_kafka()
    latencies: list[float] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(msg.latency() * 1000)

    def fatal(err: Any) -> None:
        if err.fatal():
            failures.append(str(err))

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "client.id": "pulllog-perf", "acks": -1 if acks == "all" else int(acks),
        "linger.ms": linger_ms, "compression.type": compression,
        "queue.buffering.max.messages": 1_000_000, "on_delivery": delivered, "error_cb": fatal}
    if batch_size is not None:
        config["batch.size"] = batch_size
    producer = confluent_kafka.Producer(config)
    clock = time.perf_counter
    step = max(1, n // _PROGRESS_STEPS)
    size = len(payload)
    _librdkafka_metadata(producer, topic)
    start = clock()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                producer.poll(0.005)
        if cap > 0 and i + 1 > cap * (clock() - start):
            time.sleep(max(0.0, (i + 1) / cap - (clock() - start)))
        if i % step == 0:
            producer.poll(0)
            update(len(latencies), len(latencies) * size)
    left = producer.flush(120)
    elapsed = clock() - start
    ok = len(latencies)
    update(ok, ok * size)
    errors = len(failures) + left
    first = failures[0] if failures else (f"{left} record(s) still unacknowledged after 120 s" if left else None)
    return PerfResult("librdkafka", ok, ok * size, elapsed, summarize(latencies), errors, first)


def _confluent_kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise CliError("--client librdkafka needs confluent-kafka: pip install confluent-kafka", EXIT_USAGE) from None
    return confluent_kafka


def _librdkafka_metadata(client: Any, topic: str) -> Any:
    """The topic's metadata (asking the broker to create it), or a one-line error."""
    try:
        metadata = client.list_topics(topic, timeout=10)
    except _confluent_kafka().KafkaException as exc:  # no broker answered within the timeout
        raise CliError(f"no metadata for {topic!r} from the broker: {exc}", EXIT_PROBLEM) from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise CliError(f"topic {topic!r} is not available: {info.error if info is not None else 'unknown'}",
                       EXIT_PROBLEM)
    return info


# ---------------------------------------------------------------------------- consume


@perf.command(epilog=examples(
    "pulllog perf consume bench --messages 1000000",
    "pulllog perf consume bench --messages 1000000 --fetch-max-bytes 204800 --client librdkafka",
))
@click.argument("topic")
@click.option("--messages", type=int, required=True, help="Records to read, from the beginning of the topic.")
@click.option("--fetch-max-bytes", type=int, default=52_428_800, show_default=True,
              help="Bytes per Fetch (fetch.max.bytes); per partition the same, up to 1 MiB.")
@click.option("--max-records", type=int, default=500, show_default=True,
              help="Records per poll (max.poll.records).")
@click.option("--timeout-ms", type=int, default=10_000, show_default=True,
              help="Give up when no record arrives for this long.")
@click.option("--client", type=click.Choice(_CLIENTS), default="pulllog", show_default=True,
              help="pulllog's asyncio Consumer, or librdkafka (confluent-kafka).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@bootstrap_server_option
def consume(topic: str, messages: int, fetch_max_bytes: int, max_records: int, timeout_ms: int, client: str,
            as_json: bool, bootstrap_server: str) -> None:
    """Read --messages records of TOPIC from the beginning; report rate and poll latency."""
    if messages < 1:
        raise CliError(f"--messages {messages}: read at least 1", EXIT_USAGE)
    if fetch_max_bytes < 1024:
        raise CliError(f"--fetch-max-bytes {fetch_max_bytes}: use at least 1024", EXIT_USAGE)
    if max_records < 1:
        raise CliError(f"--max-records {max_records}: must be >= 1", EXIT_USAGE)
    partition_bytes = min(fetch_max_bytes, 1 << 20)
    settings = f"fetch.max.bytes={fetch_max_bytes}, max.partition.fetch.bytes={partition_bytes}, " \
               f"{max_records} records per poll"
    with _progress(f"consume {topic}", messages) as update:
        if client == "pulllog":
            got = run_async(_consume_pulllog, bootstrap_server, topic, messages, fetch_max_bytes, partition_bytes,
                            max_records, timeout_ms, update)
        else:
            got = _consume_librdkafka(bootstrap_server, topic, messages, fetch_max_bytes, partition_bytes,
                                      max_records, timeout_ms, update)
    result = PerfResult(client, got.records, got.bytes, got.seconds, summarize(got.polls_ms or []))
    _report("consume", topic, result, as_json, settings)
    if result.records < messages:
        raise CliError(f"read {result.records:,} of {messages:,} record(s): nothing more came within "
                       f"--timeout-ms {timeout_ms} (does {topic!r} hold that many?)", EXIT_PROBLEM)


@dataclass
class _Consumed:
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    polls_ms: list[float] | None = None


async def _consume_pulllog(bootstrap: str, topic: str, n: int, fetch_max_bytes: int, partition_bytes: int,
                           max_records: int, timeout_ms: int, update: Callable[[int, int], None]) -> _Consumed:
    clock = time.perf_counter
    polls: list[float] = []
    got = size = 0
    async with Consumer(bootstrap, client_id="pulllog-perf", auto_offset_reset="earliest",
                        fetch_max_bytes=fetch_max_bytes, max_partition_fetch_bytes=partition_bytes,
                        max_poll_records=max_records) as consumer:
        partitions = sorted(await consumer.partitions_for_topic(topic))
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        await consumer.seek_to_beginning()
        start = last = clock()
        next_update = 0
        while got < n:
            batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=min(max_records, n - got))
            now = clock()
            if not batch:
                break
            polls.append((now - last) * 1000)
            for records in batch.values():
                got += len(records)
                for r in records:
                    size += (len(r.value) if r.value is not None else 0) + (len(r.key) if r.key is not None else 0)
            last = clock()
            if got >= next_update:
                update(got, size)
                next_update = got + max(1, n // _PROGRESS_STEPS)
        elapsed = last - start
    update(got, size)
    return _Consumed(got, size, elapsed, polls)


def _consume_librdkafka(bootstrap: str, topic: str, n: int, fetch_max_bytes: int, partition_bytes: int,
                        max_records: int, timeout_ms: int, update: Callable[[int, int], None]) -> _Consumed:
    confluent_kafka = _confluent_kafka()
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "client.id": "pulllog-perf", "group.id": "pulllog-perf",
        "enable.auto.commit": False, "fetch.max.bytes": fetch_max_bytes,
        "max.partition.fetch.bytes": partition_bytes, "message.max.bytes": min(fetch_max_bytes, 1_000_000),
        # else librdkafka pauses fetching for 1 s whenever 100k messages are queued
        "fetch.queue.backoff.ms": 10})
    clock = time.perf_counter
    polls: list[float] = []
    got = size = 0
    try:
        info = _librdkafka_metadata(consumer, topic)
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in sorted(info.partitions)])
        start = last = clock()
        quiet_since = start
        next_update = 0
        while got < n:
            messages = consumer.consume(min(max_records, n - got), 0.1)
            now = clock()
            records = [m for m in messages if m.error() is None]
            if not records:
                if now - quiet_since > timeout_ms / 1000:
                    break
                continue
            polls.append((now - last) * 1000)
            got += len(records)
            for m in records:
                value, key = m.value(), m.key()
                size += (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            last = quiet_since = clock()
            if got >= next_update:
                update(got, size)
                next_update = got + max(1, n // _PROGRESS_STEPS)
        elapsed = last - start
    finally:
        consumer.close()
    update(got, size)
    return _Consumed(got, size, elapsed, polls)
