"""kcat (Debian's 1.7, on librdkafka 2.0.2) against a real pulllog broker.

kcat runs as a subprocess with a timeout; a kcat that hangs is killed and the test fails
with what it printed. librdkafka 2.0.2 is an old client worth keeping: it fails on an
ApiVersions v3 response that carries tagged fields, even at their default values (so every
test here also proves that handshake), and it silently sends gzip, snappy and lz4 batches
uncompressed unless ApiVersions lists Produce v0 and FindCoordinator (so the compression
test checks the codec of the batches the broker stored, not only the lines read back).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import pytest
from waits import block_until

from pulllog.records.compression import Compression

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

TIMEOUT_S = 30


def kcat(broker: Any, *args: str, stdin: str | None = None) -> str:
    """Run kcat against the broker; return its stdout, fail the test on error or hang."""
    if KCAT is None:
        pytest.fail("kcat is not installed: apt-get install kcat")
    command = [KCAT, "-b", broker.bootstrap_servers, "-m", "10", *args]  # type: ignore[list-item]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # run() has killed it already
        pytest.fail(f"kcat hung for {TIMEOUT_S} s and was killed: {' '.join(command)}\n"
                    f"stdout: {exc.stdout!r}\nstderr: {exc.stderr!r}")
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def produce_lines(broker: Any, topic: str, lines: list[str], *extra: str) -> None:
    kcat(broker, "-P", "-t", topic, *extra, stdin="".join(f"{line}\n" for line in lines))


def consume_lines(broker: Any, topic: str, *extra: str) -> list[str]:
    return kcat(broker, "-C", "-t", topic, "-e", *extra).splitlines()


def batches(broker: Any, topic: str, partition: int = 0) -> list[Any]:
    def read() -> list[Any]:
        return broker.broker.topics.partition(topic, partition).log.read_batches(0, 64 << 20)

    return broker.call(read)


def test_metadata_lists_the_broker_and_every_topic(pulllog_broker) -> None:
    topics = pulllog_broker.broker.topics
    pulllog_broker.call(topics.create, "orders", 3)
    pulllog_broker.call(topics.create, "payments", 1)

    metadata = json.loads(kcat(pulllog_broker, "-L", "-J"))

    host, port = pulllog_broker.broker.advertised
    assert [(b["id"], b["name"]) for b in metadata["brokers"]] == [(0, f"{host}:{port}")]
    listed = {t["topic"]: sorted(p["partition"] for p in t["partitions"]) for t in metadata["topics"]}
    assert listed == {"orders": [0, 1, 2], "payments": [0]}
    for topic in metadata["topics"]:
        for p in topic["partitions"]:
            assert p["leader"] == 0 and p["replicas"] == [{"id": 0}] and p["isrs"] == [{"id": 0}]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_produce_compressed_lines_then_consume_them_back_in_order(pulllog_broker, codec: str) -> None:
    lines = [f"line {i:05d} " + "pulllog " * (i % 17) for i in range(2000)]

    produce_lines(pulllog_broker, "lines", lines, "-z", codec)

    assert consume_lines(pulllog_broker, "lines") == lines
    # librdkafka sends a batch uncompressed when compressing would not make it smaller
    # (a lone short line), so look at the batches that carry most of the records.
    stored = batches(pulllog_broker, "lines")
    in_codec = sum(b.header.records_count for b in stored if b.header.compression == Compression.parse(codec))
    assert in_codec >= len(lines) * 0.9, [(b.header.compression, b.header.records_count) for b in stored]


def test_keys_round_trip(pulllog_broker) -> None:
    pairs = [("user-1", "signed up"), ("user-2", "logged in"), ("user-1", "logged out")]

    produce_lines(pulllog_broker, "events", [f"{k}:{v}" for k, v in pairs], "-K:")

    consumed = consume_lines(pulllog_broker, "events", "-f", "%k|%s|%o\n")
    assert consumed == [f"{k}|{v}|{offset}" for offset, (k, v) in enumerate(pairs)]
    assert consume_lines(pulllog_broker, "events", "-K:") == [f"{k}:{v}" for k, v in pairs]


def test_query_offset_by_timestamp(pulllog_broker) -> None:
    produce_lines(pulllog_broker, "ticks", ["a", "b", "c"])
    first_done_ms = time.time_ns() // 1_000_000
    # so the second batch gets a later CreateTime: the clock is the state waited on
    block_until(lambda: time.time_ns() // 1_000_000 > first_done_ms, "the wall clock moved past the first run")
    produce_lines(pulllog_broker, "ticks", ["d", "e"])
    stamped = [line.split() for line in consume_lines(pulllog_broker, "ticks", "-f", "%o %T %s\n")]
    timestamps = {int(offset): int(ts) for offset, ts, _value in stamped}
    assert timestamps[2] < timestamps[3], "the two produce runs must have distinct timestamps"

    def query(timestamp: int) -> str:
        return kcat(pulllog_broker, "-Q", "-t", f"ticks:0:{timestamp}").strip()

    assert query(timestamps[3]) == "ticks [0] offset 3"
    assert query(timestamps[0] - 1000) == "ticks [0] offset 0"
    assert query(timestamps[4] + 60_000) == "ticks [0] offset -1"  # nothing that late: end


def test_consume_from_beginning(pulllog_broker) -> None:
    produce_lines(pulllog_broker, "letters", ["a", "b", "c", "d"])

    assert consume_lines(pulllog_broker, "letters", "-o", "beginning") == ["a", "b", "c", "d"]


def test_consume_from_an_absolute_offset(pulllog_broker) -> None:
    produce_lines(pulllog_broker, "letters", ["a", "b", "c", "d"])

    assert consume_lines(pulllog_broker, "letters", "-o", "2", "-f", "%o:%s\n") == ["2:c", "3:d"]
