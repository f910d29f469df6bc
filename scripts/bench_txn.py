#!/usr/bin/env python3
"""What a transaction costs a producer: a transactional producer committing every 100 ms
beside the same idempotent producer without transactions.

For each broker (pulllog, then Apache Kafka 4.1.1 from its jars, each started from scratch)
and each client (librdkafka through confluent-kafka, and pulllog's asyncio Producer), the
producer sends 1 KiB records to a one-partition topic as fast as it can for ``--seconds``:

* **idempotent**: enable.idempotence, acks=all, no transaction; the time includes the final
  flush, and every record counted is acknowledged;
* **transactional**: the same producer with a transactional.id, committing every
  ``--commit-ms`` (100) ms; the time includes the last commit, and every record counted is
  committed.

The two modes alternate (idempotent, transactional, idempotent, ...) for ``--runs`` runs, so
a busy moment of the shared machine hits both alike; the table shows the median of the runs
and the transactional producer's throughput relative to the idempotent one (Kafka's KIP-98
measured about 3% less at a 100 ms commit interval).

    python scripts/bench_txn.py [--seconds 10] [--runs 3] [--brokers pulllog,kafka] [--clients librdkafka,pulllog]

Prints a Markdown table with the machine and the date.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_paper  # noqa: E402
import bench_vs_kafka  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka import Producer as RdProducer  # noqa: E402

from pulllog import Admin, Producer  # noqa: E402
from pulllog.client.admin import NewTopic  # noqa: E402

MODES = ("idempotent", "transactional")


def librdkafka_rate(bootstrap: str, topic: str, mode: str, seconds: float, size: int, commit_s: float) -> float:
    """Records per second acknowledged (idempotent) or committed (transactional)."""
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    if mode == "transactional":
        conf["transactional.id"] = f"{topic}-tx"
    producer = RdProducer(conf)
    value = b"x" * size
    counted = 0
    if mode == "transactional":
        producer.init_transactions(60)
        producer.begin_transaction()
    started = time.monotonic()
    deadline = started + seconds
    next_commit = started + commit_s
    in_txn = 0
    while True:
        now = time.monotonic()
        if mode == "transactional" and now >= next_commit:
            producer.commit_transaction(60)
            counted += in_txn
            in_txn = 0
            next_commit = time.monotonic() + commit_s
            if now >= deadline:
                break
            producer.begin_transaction()
        elif mode == "idempotent" and now >= deadline:
            producer.flush(60)
            break
        try:
            producer.produce(topic, value, partition=0)
            in_txn += 1
            if mode == "idempotent":
                counted += 1
        except BufferError:
            producer.poll(0.001)
        except KafkaException:
            raise
        producer.poll(0)
    return counted / (time.monotonic() - started)


async def pulllog_rate(bootstrap: str, topic: str, mode: str, seconds: float, size: int, commit_s: float) -> float:
    transactional_id = f"{topic}-tx" if mode == "transactional" else None
    value = b"x" * size
    async with Producer(bootstrap, transactional_id=transactional_id) as producer:
        counted = in_txn = 0
        if transactional_id is not None:
            await producer.init_transactions()
            producer.begin_transaction()
        started = time.monotonic()
        deadline = started + seconds
        next_commit = started + commit_s
        send = producer.send
        while True:
            now = time.monotonic()
            if transactional_id is not None and now >= next_commit:
                await producer.commit_transaction()
                counted += in_txn
                in_txn = 0
                next_commit = time.monotonic() + commit_s
                if now >= deadline:
                    break
                producer.begin_transaction()
            elif transactional_id is None and now >= deadline:
                await producer.flush()
                break
            for _ in range(100):  # the clock once per 100 records
                await send(topic, value, partition=0)
            in_txn += 100
            if transactional_id is None:
                counted += 100
        return counted / (time.monotonic() - started)


async def _create(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=1)])


def measure(bootstrap: str, client: str, mode: str, run: int, args: argparse.Namespace) -> float:
    topic = f"txn-bench-{client}-{mode}-{run}"
    asyncio.run(_create(bootstrap, topic))
    commit_s = args.commit_ms / 1000
    if client == "librdkafka":
        return librdkafka_rate(bootstrap, topic, mode, args.seconds, args.record_size, commit_s)
    return asyncio.run(pulllog_rate(bootstrap, topic, mode, args.seconds, args.record_size, commit_s))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--brokers", default="pulllog,kafka")
    parser.add_argument("--clients", default="librdkafka,pulllog")
    args = parser.parse_args()
    starters: dict[str, Callable[[Path], bench_vs_kafka.Served]] = {
        "pulllog": bench_vs_kafka.start_pulllog, "kafka": bench_vs_kafka.start_kafka}
    rows = []
    machine = bench_paper.machine()  # its load average is the one at the start
    for broker in args.brokers.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-txn-{broker}-") as tmp:
            served = starters[broker](Path(tmp) / "data")
            try:
                measure(served.bootstrap, "librdkafka", "transactional", -1, argparse.Namespace(
                    **{**vars(args), "seconds": 2.0}))  # warm-up (a JVM compiles its hot paths), not recorded
                for client in args.clients.split(","):
                    rates: dict[str, list[float]] = {m: [] for m in MODES}
                    for run in range(args.runs):
                        for mode in MODES:
                            rate = measure(served.bootstrap, client, mode, run, args)
                            rates[mode].append(rate)
                            print(f"{broker} {client} {mode} run {run}: {rate:,.0f} records/s", file=sys.stderr)
                    idem, txn = (statistics.median(rates[m]) for m in MODES)
                    rows.append((broker, client, idem, txn))
            finally:
                served.stop()  # type: ignore[operator]
    mib = args.record_size / 2**20
    print(f"\n{machine}; {args.record_size}-byte records, one partition, acks=all, "
          f"commit every {args.commit_ms} ms, {args.seconds:g} s per measurement, median of {args.runs}\n")
    print("| broker | client | idempotent records/s (MiB/s) | transactional records/s (MiB/s) | transactional / idempotent |")
    print("|---|---|---|---|---|")
    for broker, client, idem, txn in rows:
        print(f"| {broker} | {client} | {idem:,.0f} ({idem * mib:.1f}) | {txn:,.0f} ({txn * mib:.1f}) | "
              f"{txn / idem:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
