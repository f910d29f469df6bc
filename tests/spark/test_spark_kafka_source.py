"""Spark's own Kafka source (spark-sql-kafka-0-10) reading pulllog topics: the path most Spark
users try first. Batch reads with startingOffsets / endingOffsets, and a streaming query into
a Parquet file sink whose checkpoint carries it across a restart with every record once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from spark_helpers import Row, create_topic, produce


def _rows(df: Any) -> list[Row]:
    return sorted((r.partition, r.offset, r.key, r.value, tuple((h.key, h.value) for h in (r.headers or ())))
                  for r in df.select("partition", "offset", "key", "value", "headers").collect())


def test_batch_read_between_offsets(kafka_source: Any, pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "spark-batch", 3)
    produced = produce(bootstrap, "spark-batch", 900, partitions=3)
    everything = (kafka_source.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "spark-batch").option("includeHeaders", "true")
                  .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    assert _rows(everything) == sorted((p, o, k, v, h) for p, o, k, v, h in produced)

    starting = {"spark-batch": {"0": 10, "1": -2, "2": 100}}
    ending = {"spark-batch": {"0": 20, "1": 5, "2": -1}}
    window = (kafka_source.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "spark-batch").option("includeHeaders", "true")
              .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending)).load())
    counts = {p: max(o for q, o, *_ in produced if q == p) + 1 for p in range(3)}
    wanted = sorted(r for r in produced if (r[0] == 0 and 10 <= r[1] < 20) or (r[0] == 1 and r[1] < 5)
                    or (r[0] == 2 and 100 <= r[1] < counts[2]))
    assert _rows(window) == wanted


def _sink_rows(out: Path) -> list[tuple[int, int, bytes | None]]:
    files = sorted(out.glob("*.parquet"))
    rows = [row for f in files for row in pq.read_table(f).select(["partition", "offset", "value"]).to_pylist()]
    return sorted((r["partition"], r["offset"], r["value"]) for r in rows)


def _stream_once(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path) -> None:
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "250").load()
              .select("partition", "offset", "value"))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None


def test_streaming_parquet_sink_survives_a_restart_with_every_record_once(
        kafka_source: Any, pulllog_broker: Any, tmp_path: Path) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "spark-stream", 2)
    first = produce(bootstrap, "spark-stream", 600, partitions=2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    _stream_once(kafka_source, bootstrap, "spark-stream", out, checkpoint)
    assert _sink_rows(out) == sorted((p, o, v) for p, o, _k, v, _h in first)

    # a new query on the same checkpoint (a restart) reads only what came after
    second = produce(bootstrap, "spark-stream", 400, partitions=2, start=600)
    _stream_once(kafka_source, bootstrap, "spark-stream", out, checkpoint)
    assert _sink_rows(out) == sorted((p, o, v) for p, o, _k, v, _h in first + second)
