#!/usr/bin/env python3
"""How fast is ``pulllog export --parquet``, and where does the time go?

Starts a broker process (``pulllog serve``), produces N records with 200-byte values (no key,
no headers) over P partitions with librdkafka, then exports the topic to Parquet:

- with the Spark engine on a local Spark (all cores), the way ``pulllog export`` runs it: JVM
  start-up is reported on its own line, then each run into a fresh directory (the first run
  also pays for starting Spark's Python workers);
- with ``--engine arrow`` (one Python process, no JVM);
- the phases of one range in one process: fetch only, fetch + decode into Arrow, and the
  whole task (+ Parquet write), which is where the engines' time goes;
- the data source read into Spark's ``noop`` sink, yielding Arrow batches (what
  ``pulllog.spark.source`` does) against yielding row tuples from the same decoder.

Throughput counts records and value bytes. The table ends with the machine and the date.

    python scripts/bench_export.py [--messages 1000000] [--partitions 4] [--runs 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin

VALUE_SIZE = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(data_dir),
                             "--listen", f"127.0.0.1:{port}", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=open(data_dir.parent / "broker.err", "ab"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the broker did not start; see broker.err")


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                         "batch.size": 1 << 20, "compression.type": "none",
                                         "queue.buffering.max.messages": 1_000_000})
    value = b"x" * VALUE_SIZE
    began = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0
    return time.perf_counter() - began


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def row(name: str, records: int, seconds: float) -> str:
    mb = records * VALUE_SIZE / 1e6
    return f"| {name:<44} | {records:>9,} | {seconds:>7.2f} | {records / seconds:>12,.0f} | {mb / seconds:>6.1f} |"


def phases(bootstrap: str, topic: str, out: Path) -> list[tuple[str, int, float]]:
    """One partition's whole range in this process: fetch, + decode, + Parquet."""
    import asyncio

    from pulllog.spark import wire
    from pulllog.spark.export import RangeTask, write_range
    from pulllog.spark.offsets import OffsetRange

    p = wire.describe(bootstrap, topic)[0]
    r = OffsetRange(topic, 0, p.log_start_offset, p.high_watermark)

    def fetch_only() -> int:
        with asyncio.Runner() as runner:
            reader = wire._RangeReader(bootstrap, r, wire.DEFAULT_FETCH_MAX_BYTES, 500, 60)
            try:
                from pulllog.records.batch import iter_batches
                while not reader.done:
                    chunk = runner.run(reader.fetch())
                    for _pos, h in iter_batches(chunk):
                        reader.position = max(reader.position, h.next_offset)
            finally:
                runner.run(reader.close())
        return r.size

    t_fetch, _ = timed(fetch_only)
    t_decode, n = timed(lambda: sum(b.num_rows for b in wire.read_range(bootstrap, r)))
    task = RangeTask(bootstrap, r, str(out), "bench", "topic")
    t_write, res = timed(lambda: write_range(task))
    return [("  fetch only (Fetch requests, batch headers)", r.size, t_fetch),
            ("  fetch + decode into Arrow batches", n, t_decode),
            ("  fetch + decode + write Parquet (one task)", res.records, t_write)]


def source_arrow_vs_tuples(spark: Any, bootstrap: str, topic: str) -> list[tuple[str, int, float]]:
    """The data source into Spark's noop sink: Arrow batches vs row tuples, same decoder."""
    from pulllog.spark import source, wire
    from pulllog.spark.columns import ColumnBuilder

    class TupleReader(source.PulllogBatchReader):
        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            import asyncio

            r = partition.range
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            with asyncio.Runner() as runner:
                reader = wire._RangeReader(self.options.bootstrap, r, wire.DEFAULT_FETCH_MAX_BYTES, 500, 60)
                try:
                    while not reader.done:
                        b = ColumnBuilder(r.topic, r.partition)
                        reader.decode(runner.run(reader.fetch()), b)
                        hk, hv, ho = b.header_keys, b.header_values, b.header_offsets
                        for i, (o, ts, tt, k, v) in enumerate(zip(b.offsets, b.timestamps, b.timestamp_types,
                                                                  b.keys, b.values)):
                            yield (r.topic, r.partition, o, epoch + dt.timedelta(milliseconds=ts), tt, k, v,
                                   list(zip(hk[ho[i]:ho[i + 1]], hv[ho[i]:ho[i + 1]])))
                finally:
                    runner.run(reader.close())

    class PulllogTuples(source.PulllogDataSource):
        @classmethod
        def name(cls) -> str:
            return "pulllog_tuples"

        def reader(self, schema: Any) -> TupleReader:
            return TupleReader(source._Options(self.options, streaming=False))

    spark.dataSource.register(PulllogTuples)
    n = sum(p.high_watermark for p in wire.describe(bootstrap, topic))
    out = []
    for fmt, label in (("pulllog", "  source yields Arrow batches -> noop sink"),
                       ("pulllog_tuples", "  source yields row tuples -> noop sink")):
        df = spark.read.format(fmt).option("bootstrap.servers", bootstrap).option("topic", topic).load()
        df.write.format("noop").mode("overwrite").save()  # warm the workers for this source
        t, _ = timed(lambda df=df: df.write.format("noop").mode("overwrite").save())
        out.append((label, n, t))
    return out


def machine(load_at_start: tuple[float, ...]) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    import pyarrow
    import pyspark

    return (f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}, "
            f"pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, {java}; 1-minute load average "
            f"{load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (other work on the machine)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2, help="export runs per engine (fresh directory each)")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()

    load_at_start = os.getloadavg()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pulllog.spark.export import export
    from pulllog.spark.session import start

    work = Path(tempfile.mkdtemp(prefix="pulllog-bench-export-"))
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = start_broker(work / "data", port)
    rows: list[tuple[str, int, float]] = []
    try:
        t_produce = produce(bootstrap, "bench", args.messages, args.partitions)
        print(f"produced {args.messages:,} records of {VALUE_SIZE} bytes in {t_produce:.1f} s", file=sys.stderr)

        for i in range(args.runs):
            out = work / f"arrow-{i}"
            t, res = timed(lambda out=out: export(bootstrap, "bench", out, engine="arrow"))
            assert res.records == args.messages
            rows.append((f"export --engine arrow (run {i + 1})", res.records, t))

        t_start, spark = timed(lambda: start(args.master, {"spark.ui.enabled": "false"}, app_name="bench"))
        try:
            for i in range(args.runs):
                out = work / f"spark-{i}"
                t, res = timed(lambda out=out: export(bootstrap, "bench", out, spark=spark))
                assert res.records == args.messages
                rows.append((f"export, Spark {args.master} (run {i + 1})", res.records, t))
            rows.append(("data source read (same topic):", 0, 0.0))
            rows.extend(source_arrow_vs_tuples(spark, bootstrap, "bench"))
        finally:
            spark.stop()
        rows.append(("one partition, one process:", 0, 0.0))
        rows.extend(phases(bootstrap, "bench", work / "phases"))
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)

    print(f"| {'what':<44} | {'records':>9} | {'seconds':>7} | {'records/s':>12} | {'MB/s':>6} |")
    print(f"|{'-' * 46}|{'-' * 11}|{'-' * 9}|{'-' * 14}|{'-' * 8}|")
    for name, n, secs in rows:
        print(row(name, n, secs) if n else f"| {name:<44} | {'':>9} | {'':>7} | {'':>12} | {'':>6} |")
    print(f"\nSpark start-up (JVM, before the first run): {t_start:.1f} s, not in the rows above.")
    print(f"{args.messages:,} records, {VALUE_SIZE}-byte values, {args.partitions} partitions; "
          f"MB/s counts value bytes.")
    print(f"{dt.date.today().isoformat()}, {machine(load_at_start)}")


if __name__ == "__main__":
    main()
