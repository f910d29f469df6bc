#!/usr/bin/env python3
"""Many partitions under a small file-descriptor limit: 1,000 topics x 10 partitions, ulimit -n 1024.

``pulllog serve`` runs under ``ulimit -n`` ``--nofile`` (soft and hard RLIMIT_NOFILE), and then:

1. **create**: the topics, ``--batch`` per CreateTopics request (librdkafka's AdminClient);
2. **produce** one record to every partition (librdkafka, acks=all), every one acknowledged;
3. **consume** every partition from offset 0, every record read back;
4. **clean restart** (SIGTERM, start again) and consume every partition again;
5. **restart after SIGKILL** and consume every partition again.

Reported per phase: wall time, open descriptors of the broker (``/proc/PID/fd``), resident
memory and, per restart, the time from starting the process to the first Metadata answer
(start to serving), as wall seconds and as the CPU seconds the broker used until then (what
a busy machine does not inflate); a restart's "stop" is the wall time SIGTERM took. RSS per partition is (RSS after the workload - RSS of the empty broker) /
partitions. A phase that fails says so and the run stops.

    python scripts/bench_scale.py [--topics 1000] [--partitions 10] [--nofile 1024]

Prints a Markdown table with the machine and the date.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_paper
import kafka_reference


@dataclass
class Broker:
    proc: subprocess.Popen[bytes]
    port: int
    start_s: float
    start_cpu_s: float

    def cpu_s(self) -> float:
        """User + system CPU seconds of the broker process so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")


def start(data_dir: Path, port: int, nofile: int, log: Path) -> Broker:
    started = time.monotonic()
    with open(log, "ab") as out:  # `ulimit -n` sets the soft and the hard limit, then the shell execs
        proc = subprocess.Popen(["sh", "-c", f'ulimit -n {nofile} && exec "$@"', "sh",
                                 sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(data_dir),
                                 "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    while not kafka_reference._answers_metadata(port):
        if proc.poll() is not None:
            raise Failed(f"the broker exited with {proc.returncode} (see {log})")
        if time.monotonic() - started > 300:
            proc.kill()
            raise Failed("the broker did not answer Metadata within 300 s")
        time.sleep(0.01)
    broker = Broker(proc, port, time.monotonic() - started, 0.0)
    broker.start_cpu_s = broker.cpu_s()
    return broker


class Failed(Exception):
    pass


def create(broker: Broker, names: list[str], partitions: int, batch: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for i in range(0, len(names), batch):
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + batch]],
                                      request_timeout=120, operation_timeout=120)
        for name, future in futures.items():
            try:
                future.result(180)
            except Exception as exc:  # noqa: BLE001 - reported, and the run stops
                raise Failed(f"create {name}: {exc}") from None


def produce(broker: Broker, names: list[str], partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                         "linger.ms": 20, "message.timeout.ms": 120_000,
                                         "queue.buffering.max.messages": 1_000_000})
    errors: list[str] = []
    acked = 0

    def report(err, _msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal acked
        if err is not None:
            errors.append(str(err))
        else:
            acked += 1

    for name in names:
        for p in range(partitions):
            producer.produce(name, f"{name}-{p}".encode(), partition=p, on_delivery=report)
        producer.poll(0)
    left = producer.flush(180)
    if errors or left or acked != len(names) * partitions:
        raise Failed(f"produce: {acked} acknowledged, {left} unsent, errors: {errors[:3]}")


def consume(broker: Broker, names: list[str], partitions: int) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-scale",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    want = {(n, p) for n in names for p in range(partitions)}
    consumer.assign([confluent_kafka.TopicPartition(n, p, 0) for n, p in want])
    got: set[tuple[str, int]] = set()
    eof: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 300
    try:
        while len(eof) < len(want) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                key = (msg.topic(), msg.partition())
                if msg.error():
                    if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        eof.add(key)
                        continue
                    raise Failed(f"consume {key}: {msg.error()}")
                if msg.value() != f"{key[0]}-{key[1]}".encode():
                    raise Failed(f"consume {key}: unexpected record {msg.value()!r}")
                got.add(key)
    finally:
        consumer.close()
    if got != want:
        raise Failed(f"consume: {len(got)} of {len(want)} partitions read back")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=50, help="topics per CreateTopics request")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and the broker's log")
    args = parser.parse_args()
    names = [f"scale-{i:05d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    rows: list[tuple[str, str, str, str, str]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    data, log, port = tmp / "data", tmp / "broker.log", bench_paper.free_port()
    broker: Broker | None = None

    def row(phase: str, seconds: float | str, b: Broker | None) -> None:
        rows.append((phase, seconds if isinstance(seconds, str) else f"{seconds:.1f}",
                     str(b.open_fds()) if b else "", f"{b.rss_mib():.0f}" if b else "",
                     f"{b.start_s:.2f} / {b.start_cpu_s:.2f}" if b and phase.startswith(("start", "restart")) else ""))

    failure = None
    try:
        broker = start(data, port, args.nofile, log)
        row("start (empty)", broker.start_s, broker)
        empty_rss = broker.rss_mib()
        for phase, run in (("create", lambda b: create(b, names, args.partitions, args.batch)),
                           ("produce 1 record each", lambda b: produce(b, names, args.partitions)),
                           ("consume each", lambda b: consume(b, names, args.partitions))):
            t = time.monotonic()
            run(broker)
            row(phase, time.monotonic() - t, broker)
        rss_per_partition = (broker.rss_mib() - empty_rss) * 1024 / total
        for phase, sig in (("restart after SIGTERM", signal.SIGTERM), ("restart after SIGKILL", signal.SIGKILL)):
            t = time.monotonic()
            broker.proc.send_signal(sig)
            if broker.proc.wait(1800) not in (0, -signal.SIGKILL):
                raise Failed(f"the broker exited with {broker.proc.returncode} on {sig.name} (see {log})")
            stopped = time.monotonic() - t
            broker = start(data, port, args.nofile, log)
            t = time.monotonic()
            consume(broker, names, args.partitions)
            row(phase, f"stop {stopped:.1f}, consume {time.monotonic() - t:.1f}", broker)
    except Failed as exc:
        failure = str(exc)
        rss_per_partition = float("nan")
    finally:
        if broker is not None and broker.proc.poll() is None:
            broker.proc.kill()
            broker.proc.wait()
    print(f"{bench_paper.machine()}")
    print(f"\n{args.topics} topics x {args.partitions} partitions = {total} partitions, "
          f"RLIMIT_NOFILE {args.nofile}\n")
    print("| phase | seconds | open fds after | RSS MiB after | start to serving, wall / CPU s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if failure:
        print(f"\nFAILED: {failure}")
    else:
        print(f"\nRSS per partition: {rss_per_partition:.1f} KiB")
    if args.keep:
        print(f"data and broker log in {tmp}")
    else:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failure else 0)


if __name__ == "__main__":
    main()
