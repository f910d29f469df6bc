"""The ``pulllog`` PySpark data source, used the way a Spark user would: batch reads between
offsets, by time, split for parallelism, and a stream run twice with ``availableNow``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql.pandas.types import to_arrow_schema
from spark_helpers import (
    assert_contiguous,
    assert_exactly,
    create_topic,
    produce,
    read_spark,
    utc_ms,
)

import pulllog.spark
from pulllog.spark.columns import ARROW_SCHEMA, SPARK_DDL


def _rows(df) -> list:
    return [(int(r[0]), int(r[1]), None if r[2] is None else bytes(r[2]), None if r[3] is None else bytes(r[3]),
             tuple((h[0], None if h[1] is None else bytes(h[1])) for h in r[4]))
            for r in df.select("partition", "offset", "key", "value", "headers").collect()]


def test_arrow_batches_have_exactly_the_schema_spark_derives_from_the_ddl(spark) -> None:
    spark_schema = spark.createDataFrame([], SPARK_DDL).schema
    assert to_arrow_schema(spark_schema, timezone="UTC").equals(ARROW_SCHEMA)


def test_batch_read_between_offsets_split_by_max_offsets_per_partition(pulllog_broker, spark) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    produced = produce(bootstrap, "orders", 1000, partitions=2)
    pulllog.spark.register(spark)

    df = (spark.read.format("pulllog")
          .option("bootstrap.servers", bootstrap)
          .option("topic", "orders")
          .option("startingOffsets", '{"orders": {"0": 100}}')  # partition 1: earliest
          .option("endingOffsets", '{"0": 400, "1": 250}')
          .option("maxOffsetsPerPartition", "100")
          .load())

    assert df.rdd.getNumPartitions() == 3 + 3  # [100,400) and [0,250) in pieces of <= 100
    wanted = [r for r in produced if (r[0] == 0 and 100 <= r[1] < 400) or (r[0] == 1 and r[1] < 250)]
    assert_exactly(_rows(df), wanted, "pulllog source")
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {"orders"}


def test_batch_read_from_a_timestamp_starts_at_the_first_record_at_or_after_it(pulllog_broker, spark) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "ticks", 2)
    base = utc_ms(dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC))
    stamps: dict[tuple[int, int], int] = {}
    # one producer, so each partition's timestamps rise with its offsets
    produced = produce(bootstrap, "ticks", 400, partitions=2, codecs=["lz4"], timestamp_ms=base, timestamps=stamps)

    df = (spark.read.format("pulllog").option("bootstrap.servers", bootstrap).option("topic", "ticks")
          .option("startingOffsets", "2024-05-01T12:00:00.250Z").load())

    assert_exactly(_rows(df), [r for r in produced if stamps[(r[0], r[1])] >= base + 250], "pulllog source")


def test_stream_with_available_now_twice_reads_each_record_once(pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "stream", 3)
    first = produce(bootstrap, "stream", 600, partitions=3)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run_once() -> int:
        query = (spark.readStream.format("pulllog")
                 .option("bootstrap.servers", bootstrap).option("topic", "stream")
                 .option("startingOffsets", "earliest").option("maxOffsetsPerPartition", "150")
                 .load()
                 .writeStream.format("parquet").option("path", str(sink))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return sum(p["numInputRows"] for p in query.recentProgress)

    assert run_once() == 600
    second = produce(bootstrap, "stream", 450, partitions=3, start=600)
    assert run_once() == 450, "the second run starts exactly where the first stopped"

    rows = read_spark(spark, sink)
    assert_exactly(rows, first + second, "spark over the stream's sink")
    assert_contiguous(rows)


def test_stream_with_max_offsets_per_trigger_reads_in_several_micro_batches(
        pulllog_broker, spark, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "paced", 2)
    produced = produce(bootstrap, "paced", 1000, partitions=2)
    sink = tmp_path / "sink"

    query = (spark.readStream.format("pulllog")
             .option("bootstrap.servers", bootstrap).option("topic", "paced")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
             .load()
             .writeStream.format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)

    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [400, 400, 200]
    assert_exactly(read_spark(spark, sink), produced, "spark over the stream's sink")
