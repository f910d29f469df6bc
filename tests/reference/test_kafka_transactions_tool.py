"""Kafka's own ``kafka-transactions.sh`` (org.apache.kafka.tools.TransactionsCommand) against
pulllog: list, describe, describe-producers, find-hanging and abort of a hanging transaction.

The hanging transaction is a transactional batch appended straight to the partition's log
(a producer whose coordinator lost its transaction would leave one like it), written 20
minutes ago by its timestamps, past the tool's default maximum transaction timeout (15).
"""

from __future__ import annotations

import re
import subprocess
import time

import confluent_kafka
import confluent_kafka.admin
import kafka_reference
from waits import on_broker

from pulllog.broker.broker import Broker
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
TOPIC, HANGING = "kafka-tool-txn", 880_001
TIMEOUT_S = 60


def tool(*args: str, expect_exit: int = 0) -> str:
    result = subprocess.run(kafka_reference.java_command(TRANSACTIONS, *args), capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == expect_exit, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout if expect_exit == 0 else result.stdout + result.stderr


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()[1:]]


def test_kafka_transactions_tool_finds_and_aborts_a_hanging_transaction(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": b})
    admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT_S)
    written = int(time.time() * 1000) - 20 * 60_000
    batch = build_batch([(None, b"h", written)], producer_id=HANGING, producer_epoch=0, base_sequence=0,
                        transactional=True)

    def append(broker_: Broker) -> None:
        broker_.partition(TOPIC, 0).append(batch)  # type: ignore[union-attr]
        broker_.on_append(TOPIC, 0)
    on_broker(broker, append)
    producer = confluent_kafka.Producer({"bootstrap.servers": b, "transactional.id": "tool-live"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"live", partition=0)
    producer.commit_transaction(TIMEOUT_S)
    producer.close(5)  # before the broker stops: no reconnect attempts after it

    listed = {row[0]: row for row in _rows(tool("--bootstrap-server", b, "list"))}
    assert listed["tool-live"][3] == "CompleteCommit"
    described = _rows(tool("--bootstrap-server", b, "describe", "--transactional-id", "tool-live"))
    assert described[0][1:3] == ["tool-live", listed["tool-live"][2]] and described[0][4] == "CompleteCommit"
    producers = {row[0]: row for row in _rows(tool("--bootstrap-server", b, "describe-producers", "--topic", TOPIC,
                                                   "--partition", "0"))}
    assert producers[str(HANGING)][5] == "0"  # CurrentTransactionStartOffset
    assert producers[listed["tool-live"][2]][5] == "None"

    hanging = _rows(tool("--bootstrap-server", b, "find-hanging", "--topic", TOPIC))
    assert [(r[0], r[1], r[2], r[5]) for r in hanging] == [(TOPIC, "0", str(HANGING), "0")]
    tool("--bootstrap-server", b, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0")
    assert _rows(tool("--bootstrap-server", b, "find-hanging", "--topic", TOPIC)) == []
    after = {row[0]: row for row in _rows(tool("--bootstrap-server", b, "describe-producers", "--topic", TOPIC,
                                               "--partition", "0"))}
    assert after[str(HANGING)][5] == "None"
    out = tool("--bootstrap-server", b, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
               expect_exit=1)
    assert re.search(r"Could not find any open transactions starting at offset 0", out), out
