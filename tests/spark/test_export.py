"""``pulllog export``: what it writes is exactly the log, for Spark, pyarrow, DuckDB and pandas,
incrementally, and after a run killed halfway.

A real broker (``pulllog_broker``), records produced by librdkafka with five codecs, a real
local Spark (one per test run, the ``spark`` fixture).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spark_helpers import (
    Row,
    assert_contiguous,
    assert_exactly,
    create_topic,
    produce,
    read_duckdb,
    read_pandas,
    read_pyarrow,
    read_spark,
    utc_ms,
)
from waits import block_until

from pulllog.spark import progress
from pulllog.spark.export import export
from pulllog.spark.progress import PROGRESS_FILE, STAGED_SUFFIX


def _data_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*=*/**/*.parquet"))}


def _rows_of_files(out: Path, names: list[str]) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        partition = int(Path(name).name.split("-")[1])
        t = pq.read_table(out / name).to_pydict()
        for o, k, v, h in zip(t["offset"], t["key"], t["value"], t["headers"]):
            rows.append((partition, o, k, v, tuple((x["key"], x["value"]) for x in h)))
    return rows


def test_export_writes_exactly_the_produced_records(pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "orders", 3)
    timestamps: dict[tuple[int, int], int] = {}
    produced = produce(bootstrap, "orders", 3000, partitions=3, timestamps=timestamps)
    out = tmp_path / "orders"

    result = export(bootstrap, "orders", out, spark=spark, max_offsets_per_file=400)

    assert result.records == 3000 and result.engine == "spark"
    for reader, rows in [("spark", read_spark(spark, out)), ("pyarrow", read_pyarrow(out)),
                         ("duckdb", read_duckdb(out)), ("pandas", read_pandas(out))]:
        assert_exactly(rows, produced, reader)
    table = pq.read_table(out)
    assert set(table.column("topic").to_pylist()) == {"orders"}
    got_ts = {(int(p), o): utc_ms(t) for p, o, t in zip(table.column("partition").to_pylist(),
                                                      table.column("offset").to_pylist(),
                                                      table.column("timestamp").to_pylist())}
    assert got_ts == timestamps


def test_second_export_writes_only_the_new_records(pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "clicks", 3)
    first = produce(bootstrap, "clicks", 900, partitions=3)
    out = tmp_path / "clicks"
    export(bootstrap, "clicks", out, spark=spark, max_offsets_per_file=200)
    before = set(_data_files(out))

    second = produce(bootstrap, "clicks", 600, partitions=3, start=900)
    result = export(bootstrap, "clicks", out, spark=spark, max_offsets_per_file=200)

    assert result.records == 600
    new_files = sorted(set(_data_files(out)) - before)
    assert_exactly(_rows_of_files(out, new_files), second, "the second run's files")
    for reader, rows in [("spark", read_spark(spark, out)), ("pyarrow", read_pyarrow(out)),
                         ("duckdb", read_duckdb(out))]:
        assert_exactly(rows, first + second, reader)
        assert_contiguous(rows)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (children of each of its threads)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                stack += children
    return found


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, waiting for its reaper, no longer writes anything)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_export_killed_with_sigkill_then_run_again_has_no_duplicate_and_no_gap(
        pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 2)
    produced = produce(bootstrap, "events", 6_000, partitions=2, value_size=200)
    out = tmp_path / "events"
    cmd = [sys.executable, "-m", "pulllog.cli.main", "export", "--parquet", str(out), "--topic", "events",
           "--bootstrap-server", bootstrap, "--master", "local[2]", "--max-offsets-per-file", "500"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        def staging() -> bool:
            assert proc.poll() is None, f"the export ended before it could be killed: {proc.stderr.read()!r}"
            return bool(list(out.glob(f"_pulllog/staging/*/**/*{STAGED_SUFFIX}")))
        block_until(staging, "the export staged its first file", timeout_s=120)
        # The driver, its JVM and the Python workers alike. PySpark's worker daemon moves to a
        # process group of its own (os.setpgid in pyspark/daemon.py), so killpg alone would
        # leave a worker writing into the staging directory after the next run cleaned it.
        tree = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        block_until(lambda: not any(_alive(pid) for pid in tree), "every process of the killed export is gone")
    finally:
        proc.wait(30)
    staged = list(out.glob(f"_pulllog/staging/*/**/*{STAGED_SUFFIX}"))
    assert 0 < len(staged) < 12, "killed while its tasks were writing (12 ranges of 500)"
    assert not (out / PROGRESS_FILE).exists() and not _data_files(out), "nothing was published"

    result = export(bootstrap, "events", out, spark=spark, max_offsets_per_file=500)

    assert result.records == 6_000
    assert any("interrupted" in line for line in result.recovered)
    assert not list(out.glob("_pulllog/staging/*"))
    for reader, rows in [("spark", read_spark(spark, out)), ("pyarrow", read_pyarrow(out)),
                         ("duckdb", read_duckdb(out))]:
        assert_exactly(rows, produced, reader)
        assert_contiguous(rows)


def test_a_run_interrupted_while_publishing_is_finished_by_the_next(
        pulllog_broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "audit", 2)
    produced = produce(bootstrap, "audit", 1000, partitions=2)
    out = tmp_path / "audit"
    real_replace = os.replace
    published: list[str] = []

    def crash_on_third_publish(src: str | Path, dst: str | Path) -> None:
        if str(src).endswith(STAGED_SUFFIX) and not str(dst).endswith(STAGED_SUFFIX):
            if len(published) == 2:
                raise KeyboardInterrupt("the machine went down here")
            published.append(str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(progress.os, "replace", crash_on_third_publish)
    with pytest.raises(KeyboardInterrupt):
        export(bootstrap, "audit", out, engine="arrow", max_offsets_per_file=100)
    monkeypatch.undo()
    state = json.loads((out / PROGRESS_FILE).read_text())
    assert state["committed"] == {} and len(state["pending"]["files"]) == 10
    visible = read_pyarrow(out)
    assert sorted(r[1] for r in visible) == list(range(200)), "a prefix of partition 0, in order"

    result = export(bootstrap, "audit", out, engine="arrow", max_offsets_per_file=100)

    assert result.records == 0, "the interrupted run's records were published, not read again"
    assert any("finished publishing" in line for line in result.recovered)
    assert_exactly(read_duckdb(out), produced, "duckdb")
    assert_exactly(read_pyarrow(out), produced, "pyarrow")


def test_arrow_engine_writes_the_same_files_as_the_spark_engine(pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "same", 2)
    produce(bootstrap, "same", 2000, partitions=2)

    export(bootstrap, "same", tmp_path / "spark", spark=spark, max_offsets_per_file=300)
    export(bootstrap, "same", tmp_path / "arrow", engine="arrow", max_offsets_per_file=300)

    spark_files = {k: hashlib.sha256(v).hexdigest() for k, v in _data_files(tmp_path / "spark").items()}
    arrow_files = {k: hashlib.sha256(v).hexdigest() for k, v in _data_files(tmp_path / "arrow").items()}
    assert len(spark_files) == 8
    assert arrow_files == spark_files


def test_export_partitioned_by_date_puts_each_record_under_its_utc_day(pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "days", 2)
    # record i is stamped base + i ms: 23:59:59.000-.299 on May 1, then 00:00:00.300-.599 on May 2
    day1 = produce(bootstrap, "days", 300, partitions=2, timestamp_ms=utc_ms_of("2024-05-01T23:59:59.000"))
    day2 = produce(bootstrap, "days", 300, partitions=2, start=300, timestamp_ms=utc_ms_of("2024-05-02T00:00:00.000"))
    out = tmp_path / "days"

    export(bootstrap, "days", out, spark=spark, partition_by="date")

    df = spark.read.parquet(str(out))
    by_day = {str(r["date"]): r["n"] for r in df.groupBy("date").count().withColumnRenamed("count", "n").collect()}
    assert by_day == {"2024-05-01": 300, "2024-05-02": 300}
    assert_exactly(read_spark(spark, out), day1 + day2, "spark")
    assert_exactly(read_duckdb(out), day1 + day2, "duckdb")


def utc_ms_of(text: str) -> int:
    import datetime as dt

    return utc_ms(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC))
