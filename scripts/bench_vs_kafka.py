#!/usr/bin/env python3
"""pulllog beside Apache Kafka itself: the paper's experiment on both brokers, in one run.

Both brokers start from scratch for each run, in turns (pulllog, Kafka, pulllog, ...), so a busy
spell of the shared machine hits both alike. Per broker and run:

* **start to serving**: from starting the process to the first Metadata answer that lists the
  broker (``pulllog serve --log-level warning``, its package byte-compiled first as
  ``pip install`` does, so that no start compiles sources even where PYTHONDONTWRITEBYTECODE
  is set; Kafka 4.1.1 as a single-node KRaft broker from its jars, after formatting its
  storage, which is not counted);
* **resident memory** (VmRSS from /proc) once serving, and after the whole workload;
* then 20,000 messages produced and read back, not recorded (a JVM compiles its hot paths first);
* for librdkafka producing 200-byte messages to one partition with acks=1 at batch 1, batch 50
  and its default batching, then a consumer reading them back: messages/s and **broker CPU
  seconds per million messages** (user + system of the broker process, every thread, from
  /proc).

    python scripts/bench_vs_kafka.py [--messages 200000] [--batch1-messages 20000] [--runs 3]

Prints a Markdown table with the machine and the date.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_paper  # noqa: E402
import kafka_reference  # noqa: E402

CASES = ("batch 1", "batch 50", "natural")


@dataclass
class Served:
    name: str
    pid: int
    port: int
    start_s: float
    stop: object

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")


def _wait_serving(port: int, proc: subprocess.Popen[bytes], started: float) -> float:
    while not kafka_reference._answers_metadata(port):  # noqa: SLF001
        if proc.poll() is not None:
            raise SystemExit(f"the broker exited with {proc.returncode}")
        time.sleep(0.005)
    return time.monotonic() - started


def compile_pulllog() -> None:
    """Byte-compile the pulllog package that ``python -m pulllog.cli.main`` will import, as
    ``pip install`` does: a Kafka broker starts from compiled classes, and a pulllog started
    where PYTHONDONTWRITEBYTECODE is set (or from a read-only tree) would otherwise compile
    every module it imports at every start. Up-to-date files are skipped."""
    spec = importlib.util.find_spec("pulllog")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pulllog is not importable: pip install -e . (or set PYTHONPATH=src)")
    for directory in spec.submodule_search_locations:
        compileall.compile_dir(directory, quiet=1)


def start_pulllog(data_dir: Path) -> Served:
    compile_pulllog()
    port = bench_paper.free_port()
    started = time.monotonic()
    proc = subprocess.Popen([*bench_paper.broker_prefix(), sys.executable, "-m", "pulllog.cli.main", "serve",
                             "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start_s = _wait_serving(port, proc, started)

    def stop() -> None:
        proc.terminate()
        proc.wait(60)
    return Served("pulllog", proc.pid, port, start_s, stop)


def start_kafka(data_dir: Path) -> Served:
    ref = kafka_reference.KafkaReference(data_dir, bench_paper.free_port(), bench_paper.free_port())
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in ref.properties().items()))
    libs = kafka_reference.fetch_jars()
    subprocess.run(kafka_reference.java_command("kafka.tools.StorageTool", "format", "-t", kafka_reference._cluster_id(),  # noqa: SLF001
                                                "-c", str(config), libs=libs), check=True, capture_output=True)
    started = time.monotonic()
    # Kafka's own heap default (kafka-server-start.sh: -Xmx1G -Xms1G), not the test fixture's small one
    cmd = ["java", "-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-cp", f"{libs}/*", "kafka.Kafka", str(config)]
    proc = subprocess.Popen([*bench_paper.broker_prefix(), *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    start_s = _wait_serving(ref.port, proc, started)

    def stop() -> None:
        proc.terminate()
        proc.wait(60)
    return Served("kafka", proc.pid, ref.port, start_s, stop)


@dataclass
class Result:
    broker: str
    start_s: float
    rss_start: float
    rss_end: float = 0.0
    rates: dict[str, float] = field(default_factory=dict)
    cpu_per_m: dict[str, float] = field(default_factory=dict)


WARM_UP = 20_000


def warm_up(served: Served) -> None:
    """Messages sent and read back before measuring, not recorded: a JVM compiles its hot paths
    in the first seconds, and the first requests of any broker open files and fill caches."""
    bench_paper.librdkafka_produce(served.bootstrap, "warm-up", WARM_UP, "natural", bench_paper.Curve(WARM_UP))
    bench_paper.librdkafka_consume(served.bootstrap, "warm-up", WARM_UP, bench_paper.Curve(WARM_UP))


def one_run(served: Served, args: argparse.Namespace, run: int) -> Result:
    result = Result(served.name, served.start_s, served.rss_mib())
    warm_up(served)
    for case in CASES:
        n = args.batch1_messages if case == "batch 1" else args.messages
        topic = f"vs-{case.replace(' ', '')}-{run}"
        curve = bench_paper.Curve(n)
        cpu = served.cpu_seconds()
        bench_paper.librdkafka_produce(served.bootstrap, topic, n, case, curve)
        result.cpu_per_m[case] = (served.cpu_seconds() - cpu) / n * 1e6
        result.rates[case] = n / curve.points[-1][0]
    curve = bench_paper.Curve(args.messages)
    cpu = served.cpu_seconds()
    bench_paper.librdkafka_consume(served.bootstrap, f"vs-natural-{run}", args.messages, curve)
    result.cpu_per_m["consume"] = (served.cpu_seconds() - cpu) / args.messages * 1e6
    result.rates["consume"] = args.messages / curve.points[-1][0]
    result.rss_end = served.rss_mib()
    return result


def table(results: list[Result]) -> str:
    def med(broker: str, get) -> float:  # type: ignore[no-untyped-def]
        return statistics.median(get(r) for r in results if r.broker == broker)

    rows = [("start to serving (s)", lambda r: r.start_s, "{:.2f}"),
            ("resident memory when serving (MiB)", lambda r: r.rss_start, "{:.0f}"),
            ("resident memory after the workload (MiB)", lambda r: r.rss_end, "{:.0f}")]
    for case in (*CASES, "consume"):
        rows.append((f"{case}: msgs/s", lambda r, c=case: r.rates[c], "{:,.0f}"))
        rows.append((f"{case}: broker CPU s per M msgs", lambda r, c=case: r.cpu_per_m[c], "{:.2f}"))
    lines = ["| measure (median) | pulllog | Apache Kafka 4.1.1 | pulllog / Kafka |", "|---|---|---|---|"]
    for name, get, fmt in rows:
        p, k = med("pulllog", get), med("kafka", get)
        lines.append(f"| {name} | {fmt.format(p)} | {fmt.format(k)} | {p / k:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch1-messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    kafka_reference.fetch_jars()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-kafka-") as tmp:
        for run in range(args.runs):
            for name, start in (("pulllog", start_pulllog), ("kafka", start_kafka)):
                served = start(Path(tmp) / f"{name}-{run}")
                try:
                    results.append(one_run(served, args, run))
                finally:
                    served.stop()  # type: ignore[operator]
                r = results[-1]
                print(f"run {run + 1} {name:8} start {r.start_s:5.2f} s  rss {r.rss_start:6.0f} -> {r.rss_end:6.0f} MiB  "
                      + "  ".join(f"{c}: {r.rates[c]:,.0f}/s {r.cpu_per_m[c]:.2f} s/M" for c in r.rates),
                      file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {bench_paper.machine()}, {platform.platform()}, "
          f"Python {platform.python_version()}; {args.runs} runs, {args.messages:,} x 200-byte messages "
          f"({args.batch1_messages:,} at batch 1), librdkafka {__import__('confluent_kafka').libversion()[0]}, "
          f"acks=1, one partition; load average at the end {load[0]:.1f}\n")
    print(table(results))


if __name__ == "__main__":
    main()
