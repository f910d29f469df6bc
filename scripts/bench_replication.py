#!/usr/bin/env python3
"""What replication costs, and how long a failover takes: issue 16's benchmark.

Starts a private ZooKeeper and three ``pulllog serve`` brokers on 127.0.0.1-3 (scripts/
zk_cluster.py), then with librdkafka's producer at its default batching (linger.ms 5):

* **RF=1 acks=1**: a topic of one partition with one replica (broker 1);
* **RF=3 acks=all**: a topic of one partition on brokers 1, 2, 3 (led by 1),
  min.insync.replicas=2, idempotent producer;

each ``--runs`` times, the two cases taking turns (a busy spell on a shared machine hits
both alike). Reported per case: messages/s (first produce to last acknowledgement, median
and range) and the p99 of each message's produce latency (produce() to its delivery
report), and the ratios the issue sets targets for (RF=3 throughput >= half of RF=1's, p99
within 3x).

Then the **failover**: an acks=all producer keeps writing to the RF=3 topic, its leader
(broker 1) is SIGKILLed, and the time from the kill to the first write acknowledged by the
new leader is measured (target: under ``zookeeper.session.timeout.ms`` + 1 s; the dead
leader's session must time out before the controller elects another).

    python scripts/bench_replication.py [--messages 100000] [--runs 3] [--session-timeout-ms 6000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zk_cluster

VALUE = b"x" * 200


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("rf1", 1, replica_assignment=[[1]]),
        NewTopic("rf3", 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"}),
    ], operation_timeout=60)
    for future in futures.values():
        future.result()


def produce_run(bootstrap: str, topic: str, acks: str, messages: int) -> tuple[float, float]:
    """(messages/s, p99 latency in ms) of one run."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                         "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 120_000})
    latencies: list[float] = []
    failed: list[object] = []
    last = [0.0]

    def delivered(err: object, _msg: object, sent: float) -> None:
        now = time.perf_counter()
        if err is not None:
            failed.append(err)
        latencies.append(now - sent)
        last[0] = now

    producer.produce(topic, VALUE)  # the connection and metadata, outside the measurement
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(messages):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, e.g. {failed[0]}")
    latencies.sort()
    return messages / (last[0] - start), latencies[int(len(latencies) * 0.99) - 1] * 1000


def failover(cluster: list[zk_cluster.BrokerProcess]) -> float:
    """Seconds from the leader's SIGKILL to the first acks=all write the new leader acknowledges."""
    from confluent_kafka import Producer

    everyone = ",".join(b.bootstrap_servers for b in cluster)
    producer = Producer({"bootstrap.servers": everyone, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 120_000, "topic.metadata.refresh.interval.ms": 1000})
    acked_after: list[float] = []
    killed_at = [float("inf")]
    stop = threading.Event()

    def delivered(err: object, _msg: object, sent: float) -> None:
        if err is None and sent > killed_at[0]:
            acked_after.append(time.monotonic())

    def write() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            producer.produce("rf3", VALUE, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
            producer.poll(0.005)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(1.0)  # writing steadily
        killed_at[0] = time.monotonic()
        cluster[0].kill()
        deadline = killed_at[0] + 120
        while not acked_after and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        writer.join()
        producer.flush(30)
    if not acked_after:
        raise RuntimeError("no write was acknowledged within 120 s of the leader's SIGKILL")
    return acked_after[0] - killed_at[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000, help="the brokers' zookeeper.session.timeout.ms")
    args = parser.parse_args()
    missing = zk_cluster.missing_tools()
    if missing:
        sys.exit(f"bench_replication: {missing}")
    base = Path(tempfile.mkdtemp(prefix="pulllog-bench-replication-"))
    zk = zk_cluster.ZooKeeper(base / "zookeeper").start()
    brokers: list[zk_cluster.BrokerProcess] = []
    try:
        brokers = zk_cluster.start_brokers(zk.connect + "/bench", base, 3,
                                           (f"zookeeper.session.timeout.ms={args.session_timeout_ms}",))
        bootstrap = ",".join(b.bootstrap_servers for b in brokers)
        create_topics(bootstrap)
        results: dict[str, list[tuple[float, float]]] = {"RF=1 acks=1": [], "RF=3 acks=all": []}
        for run in range(1, args.runs + 1):
            for name, topic, acks in (("RF=1 acks=1", "rf1", "1"), ("RF=3 acks=all", "rf3", "all")):
                rate, p99 = produce_run(bootstrap, topic, acks, args.messages)
                results[name].append((rate, p99))
                print(f"  run {run}: {name:14} {rate:10,.0f} msgs/s  p99 {p99:8.1f} ms", flush=True)
        seconds = failover(brokers)
    finally:
        for broker in brokers:
            broker.stop()
        zk.stop()
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n# Replication's cost on one machine\n\n{when}, {_cpu_name()}, {os.cpu_count()} cpu(s), "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end; three "
          f"brokers and ZooKeeper on this machine; librdkafka, default batching, 200-byte values, "
          f"{args.messages:,} messages per run, {args.runs} runs per case\n")
    print("| case | msgs/s (median) | range | p99 produce latency, ms (median) |")
    print("|---|---:|---:|---:|")
    medians = {}
    for name, rows in results.items():
        rates, p99s = [r for r, _ in rows], [p for _, p in rows]
        medians[name] = (statistics.median(rates), statistics.median(p99s))
        print(f"| {name} | {medians[name][0]:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | {medians[name][1]:.1f} |")
    rf1, rf3 = medians["RF=1 acks=1"], medians["RF=3 acks=all"]
    print(f"\nRF=3 acks=all / RF=1 acks=1: throughput {rf3[0] / rf1[0]:.2f}x (target >= 0.5), "
          f"p99 {rf3[1] / rf1[1]:.2f}x (target <= 3)")
    print(f"Failover: the leader's SIGKILL to the first acknowledged write {seconds:.2f} s "
          f"(zookeeper.session.timeout.ms {args.session_timeout_ms}: target under {args.session_timeout_ms / 1000 + 1:.1f} s)")


if __name__ == "__main__":
    main()
