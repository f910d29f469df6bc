"""Transactions and Spark: the ``pulllog`` data source and the export read committed data by
default, so an aborted transaction never reaches a DataFrame or Parquet, and an open one waits
for a later run. The transactions are written by pulllog's transactional producer, to the
reference Kafka broker (one JVM per run, tests/conftest.py) and to pulllog."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import pulllog.spark
from pulllog import Admin, Producer, TopicPartition
from pulllog.client.admin import NewTopic, OffsetSpec
from pulllog.spark.export import export


@pytest.fixture(params=["kafka", "pulllog"])
def kafka(request: pytest.FixtureRequest) -> str:
    """A broker with transactions: Apache Kafka (one JVM per run) or pulllog."""
    fixture = "kafka_reference_broker" if request.param == "kafka" else "pulllog_broker"
    return request.getfixturevalue(fixture).bootstrap_servers


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


async def _setup(bootstrap: str, topic: str) -> Producer:
    """Committed c0 c1, aborted a0 a1, committed c2 on each of two partitions; returns the
    producer, ready for another transaction."""
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=2)])
    producer = Producer(bootstrap, transactional_id=f"{topic}-tx")
    await producer.start()
    await producer.init_transactions()
    for values, commit in (([b"c0", b"c1"], True), ([b"a0", b"a1"], False), ([b"c2"], True)):
        producer.begin_transaction()
        for value in values:
            for partition in (0, 1):
                await producer.send(topic, value, partition=partition)
        await producer.flush()
        await (producer.commit_transaction() if commit else producer.abort_transaction())
    return producer


async def _settled(bootstrap: str, topic: str) -> None:
    """Wait until no transaction is open on the topic (every marker written)."""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    async with Admin(bootstrap) as admin:
        while True:
            hw = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps})
            lso = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}, read_committed=True)
            if all(hw[tp].offset == lso[tp].offset for tp in tps):  # type: ignore[union-attr]
                return
            await asyncio.sleep(0.05)


def test_the_data_source_reads_committed_records_by_default(kafka: str, spark: Any, runner: asyncio.Runner) -> None:
    topic = "spark-read-committed"
    producer = runner.run(_setup(kafka, topic))
    runner.run(producer.close())
    runner.run(_settled(kafka, topic))
    pulllog.spark.register(spark)
    reader = spark.read.format("pulllog").option("bootstrap.servers", kafka).option("topic", topic)

    committed = sorted((r["partition"], bytes(r["value"])) for r in reader.load().select("partition", "value").collect())
    assert committed == sorted((p, v) for p in (0, 1) for v in (b"c0", b"c1", b"c2"))
    everything = [bytes(r["value"]) for r in
                  reader.option("isolationLevel", "read_uncommitted").load().select("value").collect()]
    assert sorted(everything) == sorted([b"c0", b"c1", b"a0", b"a1", b"c2"] * 2)


def test_the_export_skips_aborted_transactions_and_waits_for_open_ones(
        kafka: str, spark: Any, runner: asyncio.Runner, tmp_path: Path) -> None:
    topic = "export-read-committed"
    producer = runner.run(_setup(kafka, topic))
    try:
        producer.begin_transaction()  # open during the first export
        for partition in (0, 1):
            runner.run(producer.send(topic, b"late", partition=partition))
        runner.run(producer.flush())
        out = tmp_path / "out"

        first = export(kafka, topic, out, spark=spark)
        assert sorted(pq.read_table(out).column("value").to_pylist()) == sorted([b"c0", b"c1", b"c2"] * 2)
        assert first.records == 6

        runner.run(producer.commit_transaction())
        runner.run(_settled(kafka, topic))
        second = export(kafka, topic, out, spark=spark)
        assert second.records == 2  # the transaction that was open, now committed, and nothing twice
        assert sorted(pq.read_table(out).column("value").to_pylist()) == sorted([b"c0", b"c1", b"c2", b"late"] * 2)
    finally:
        runner.run(producer.close())
