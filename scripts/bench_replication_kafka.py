#!/usr/bin/env python3
"""Issue 16's replication benchmark against Apache Kafka 4.1.1 on the same machine: the
reference point for pulllog's figures.

The same cases and the same producer as scripts/bench_replication.py (its ``create_topics``
and ``produce_run``): librdkafka at its default batching, 200-byte values, as fast as the
producer goes; **RF=1 acks=1** (a partition on node 1) against **RF=3 acks=all** (a
partition on nodes 1, 2, 3, led by 1, min.insync.replicas=2, idempotent producer), taking
turns, ``--runs`` times each. The cluster is scripts/kafka_cluster.py's: three KRaft nodes
(broker and controller each) on 127.0.0.1-3, with its small heap and C1-only JVM options,
so Kafka too shares the machine's cores with its followers and the producer.

    python scripts/bench_replication_kafka.py [--messages 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_replication
import kafka_cluster
import kafka_reference

CASES = (("RF=1 acks=1", "rf1", "1"), ("RF=3 acks=all", "rf3", "all"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    missing = kafka_reference.missing_tools()
    if missing:
        sys.exit(f"bench_replication_kafka: {missing}")
    cluster = kafka_cluster.KafkaCluster(Path(tempfile.mkdtemp(prefix="pulllog-bench-replication-kafka-")))
    cluster.start()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _t, _a in CASES}
    try:
        bench_replication.create_topics(cluster.bootstrap_servers)
        for run in range(1, args.runs + 1):
            for name, topic, acks in CASES:
                rate, p99 = bench_replication.produce_run(cluster.bootstrap_servers, topic, acks, args.messages)
                results[name].append((rate, p99))
                print(f"  run {run}: {name:14} {rate:10,.0f} msgs/s  p99 {p99:8.1f} ms  "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        cluster.stop()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n# Apache Kafka 4.1.1's replication cost on one machine\n\n{when}, "
          f"{bench_replication._cpu_name()}, {os.cpu_count()} cpu(s), load average "
          f"{os.getloadavg()[0]:.1f} at the end; three KRaft nodes on this machine; librdkafka, default "
          f"batching, 200-byte values, {args.messages:,} messages per run, {args.runs} runs per case\n")
    print("| case | msgs/s (median) | range | p99 produce latency, ms (median) | p99 range |")
    print("|---|---:|---:|---:|---:|")
    medians = {}
    for name, rows in results.items():
        rates, p99s = [r for r, _ in rows], [p for _, p in rows]
        medians[name] = (statistics.median(rates), statistics.median(p99s))
        print(f"| {name} | {medians[name][0]:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | "
              f"{medians[name][1]:.1f} | {min(p99s):.1f}-{max(p99s):.1f} |")
    rf1, rf3 = medians["RF=1 acks=1"], medians["RF=3 acks=all"]
    print(f"\nRF=3 acks=all / RF=1 acks=1 on Kafka: throughput {rf3[0] / rf1[0]:.2f}x, p99 {rf3[1] / rf1[1]:.2f}x "
          f"(Python {platform.python_version()} for the producer's loop)")


if __name__ == "__main__":
    main()
