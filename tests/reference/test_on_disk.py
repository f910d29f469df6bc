"""On-disk compatibility, both ways: Kafka's DumpLogSegments reads pulllog's segment files,
and pulllog reads the segment files that Apache Kafka wrote, with the same records.

Records go in through librdkafka (every codec, keys, headers, an idempotent producer), so
both brokers store batches as a real client builds them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import kafka_reference
import pytest

from pulllog.log import Log
from pulllog.testing import BrokerThread

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _produce(bootstrap: str, topic: str, codec: str) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """Twenty records of one codec in a few batches; returns (key, value, headers) in order."""
    sent = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                         "enable.idempotence": True, "linger.ms": 5,
                                         "batch.num.messages": 7})
    for i in range(20):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = f"{codec} value {i} ".encode() * (1 + i % 3)
        headers = [("h", f"{i}".encode())] if i % 2 else []
        producer.produce(topic, value, key, partition=0, headers=headers)
        sent.append((key, value, headers))
    assert producer.flush(30) == 0
    return sent


def _admin_create(bootstrap: str, topic: str) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    # an index entry every 100 bytes, so that 20 records fill the .index and .timeindex
    new = confluent_kafka.admin.NewTopic(topic, 1, 1, config={"index.interval.bytes": "100"})
    admin.create_topics([new])[topic].result(30)


_DUMPED_RECORD = re.compile(r"^\| offset: (\d+) .*?keySize: (-?\d+) valueSize: (-?\d+) .*?headerKeys: \[([^\]]*)\]"
                            r"(?: key: (.*?))? payload: (.*)$")


def _dump(path: Path, *args: str) -> str:
    result = subprocess.run(kafka_reference.java_command("kafka.tools.DumpLogSegments", *args, "--files", str(path)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_dump_log_reads_pulllog_segments(codec: str, kafka_reference_broker: Any, tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as broker:
        _admin_create(broker.bootstrap_servers, "ondisk")
        sent = _produce(broker.bootstrap_servers, "ondisk", codec)
    partition_dir = tmp_path / "data" / "ondisk-0"
    [segment] = sorted(partition_dir.glob("*.log"))
    out = _dump(segment, "--deep-iteration", "--print-data-log")
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert batches and all("isvalid: true" in b for b in batches)
    assert all(f"compresscodec: {codec}" in b for b in batches)
    assert all("producerId: -1" not in b for b in batches)  # idempotent: the producer id is kept
    dumped = [_DUMPED_RECORD.match(line) for line in out.splitlines() if line.startswith("| offset:")]
    assert all(dumped)
    got = [(m.group(5), m.group(6), m.group(4)) for m in dumped]  # type: ignore[union-attr]
    assert [int(m.group(1)) for m in dumped] == list(range(20))  # type: ignore[union-attr]
    assert got == [(k.decode() if k is not None else None, v.decode(), ",".join(h for h, _ in hs))
                   for k, v, hs in sent]
    for index in (segment.with_suffix(".index"), segment.with_suffix(".timeindex")):
        assert index.stat().st_size > 0
        assert "passed sanity check" in _dump(index, "--index-sanity-check")


@pytest.mark.parametrize("codec", CODECS)
def test_pulllog_reads_segments_written_by_kafka(codec: str, kafka_reference_broker: Any, tmp_path: Path) -> None:
    topic = f"ondisk-{codec}"
    _admin_create(kafka_reference_broker.bootstrap_servers, topic)
    sent = _produce(kafka_reference_broker.bootstrap_servers, topic, codec)
    kafka_dir = kafka_reference_broker.data_dir / "logs" / f"{topic}-0"
    [kafka_segment] = sorted(kafka_dir.glob("*.log"))
    # Kafka's own files, as it left them (its active segment's indexes preallocated, 10 MiB of zeros)
    for path in (kafka_segment,):
        verdict = subprocess.run([sys.executable, "-m", "pulllog.cli.main", "inspect", "segment", str(path), "--verify"],
                                 capture_output=True, text=True, timeout=60)
        assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    # The whole partition directory opened as a pulllog log (a copy: Kafka still has it open).
    copy = tmp_path / f"{topic}-0"
    shutil.copytree(kafka_dir, copy)
    log = Log.open(copy)
    try:
        records = [r for batch in log.read_batches(0, 1 << 20) for r in batch.records()]
        assert log.log_end_offset == 20
    finally:
        log.close()
    assert [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in records] == \
        [(k, v, list(hs)) for k, v, hs in sent]


def test_kafka_dump_log_reads_pulllog_transaction_markers_and_txnindex(tmp_path: Path) -> None:
    from pulllog.records import build_batch

    log = Log.open(tmp_path / "txn-0")
    log.append(build_batch([(None, b"p0")]))
    log.append(build_batch([(None, b"t1")], producer_id=9, producer_epoch=3, base_sequence=0, transactional=True))
    log.write_txn_marker(9, 3, False, coordinator_epoch=5)  # offset 2
    log.append(build_batch([(None, b"t2")], producer_id=9, producer_epoch=3, base_sequence=1, transactional=True))
    log.write_txn_marker(9, 3, True, coordinator_epoch=5)  # offset 4: a commit is not indexed
    log.close()
    [segment] = sorted((tmp_path / "txn-0").glob("*.log"))
    markers = [line for line in _dump(segment, "--deep-iteration").splitlines() if "endTxnMarker" in line]
    assert [m.split("endTxnMarker: ")[1] for m in markers] == ["ABORT coordinatorEpoch: 5",
                                                               "COMMIT coordinatorEpoch: 5"]
    entries = [line for line in _dump(segment.with_suffix(".txnindex")).splitlines() if line.startswith("version")]
    assert entries == ["version: 0 producerId: 9 firstOffset: 1 lastOffset: 2 lastStableOffset: 3"]
