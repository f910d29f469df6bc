"""Apache Kafka's Java client (kafka-clients) against pulllog: the idempotent producer with
every codec, two group members with the cooperative-sticky assignor, and the AdminClient.

The Java side is tests/reference/java/ClientCheck.java, run in source-file mode from Kafka's
jars; it prints one line per fact, which these tests read.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import kafka_reference
import pytest

from pulllog import Admin, Consumer, TopicPartition
from pulllog.testing import BrokerThread

CLIENT_CHECK = Path(__file__).parent / "java" / "ClientCheck.java"



def client_check(*args: str) -> list[str]:
    cmd = kafka_reference.java_command(str(CLIENT_CHECK), *args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ClientCheck {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout.splitlines()


async def _read_all(bootstrap: str, topic: str, partition: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    async with Consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, partition)])
        await consumer.seek_to_beginning()
        got: list[tuple[bytes | None, bytes | None]] = []
        while len(got) < count:
            batch = await consumer.getmany(timeout_ms=1000)
            got += [(r.key, r.value) for records in batch.values() for r in records]
        return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_idempotent_java_producer_every_codec(codec: str, broker: BrokerThread) -> None:
    topic = f"java-{codec}"
    lines = client_check("produce", broker.bootstrap_servers, topic, codec, "300", "0")
    assert lines == [f"acked 0 {i}" for i in range(300)]
    got = await _read_all(broker.bootstrap_servers, topic, 0, 300)
    assert got == [(f"k{i}".encode(), f"{codec}-v{i}".encode()) for i in range(300)]


async def test_two_java_consumers_share_a_group_cooperatively(broker: BrokerThread) -> None:
    topic = "java-group"
    subprocess.run(["pulllog", "topic", "create", topic, "--partitions", "4",
                    "--bootstrap-server", broker.bootstrap_servers], check=True, capture_output=True)
    for codec in ("none", "lz4"):
        client_check("produce", broker.bootstrap_servers, topic, codec, "500")
    lines = client_check("consume-group", broker.bootstrap_servers, topic, "java-group-g", "1000")
    assert not [line for line in lines if line.startswith("duplicate")]
    assert "consumed 1000" in lines
    owned = {line.split()[1]: int(line.split()[2]) for line in lines if line.startswith("owned")}
    assert owned["member0"] >= 1 and owned["member1"] >= 1, lines
    async with Admin(broker.bootstrap_servers) as admin:
        committed = await admin.list_group_offsets("java-group-g")
    assert sorted(tp.partition for tp in committed) == [0, 1, 2, 3]
    assert sum(offset for offset, _ in committed.values()) == 1000


def test_java_admin_client(broker: BrokerThread) -> None:
    lines = client_check("admin", broker.bootstrap_servers, "java-admin")
    assert lines == [
        "cluster brokers 1",
        "listed true",
        "partitions 3",
        "partitions after 4",
        "retention.ms 7200000 DYNAMIC_TOPIC_CONFIG",
        "latest 10",
        "earliest 4",
        "listed after delete false",
    ]
