"""Kafka's own command-line tools against pulllog, run straight from Kafka's jars.

kafka-topics, kafka-console-producer / -consumer, kafka-consumer-groups, kafka-configs,
kafka-get-offsets, kafka-delete-records, kafka-producer-perf-test and
kafka-consumer-perf-test: the main classes those scripts run, with the scripts' arguments.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import kafka_reference

from pulllog.testing import BrokerThread

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"



def tool(main_class: str, *args: str, stdin: str | None = None) -> str:
    """Run one of Kafka's tools; its standard output (it must exit 0)."""
    result = subprocess.run(kafka_reference.java_command(main_class, *args), input=stdin, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, f"{main_class} {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def offsets(broker: BrokerThread, topic: str, time: str = "-1") -> dict[int, int]:
    out = tool(GET_OFFSETS, "--bootstrap-server", broker.bootstrap_servers, "--topic", topic, "--time", time)
    return {int(p): int(o) for p, o in re.findall(rf"^{re.escape(topic)}:(\d+):(\d+)$", out, re.M)}


def test_kafka_topics_creates_lists_describes_and_adds_partitions(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    assert "Created topic orders." in tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "orders",
                                           "--partitions", "3", "--config", "retention.ms=3600000")
    assert "orders" in tool(TOPICS, "--bootstrap-server", b, "--list").split()
    tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "4")
    described = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", "orders")
    assert "PartitionCount: 4" in described
    assert "retention.ms=3600000" in described
    assert len(re.findall(r"Partition: \d+\s+Leader: 0", described)) == 4


def test_console_producer_and_consumer_round_trip_in_a_group(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    lines = [f"k{i}:value {i}" for i in range(40)]
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", "console", "--property", "parse.key=true",
         "--property", "key.separator=:", stdin="\n".join(lines) + "\n")
    out = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", "console", "--from-beginning",
               "--max-messages", "40", "--group", "console-group", "--property", "print.key=true",
               "--property", "key.separator=:")
    assert sorted(out.splitlines()) == sorted(lines)
    groups = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", "console-group")
    assert re.search(r"console-group\s+console\s+0\s+40\s+40\s+0", groups), groups


def test_consumer_groups_reset_offsets_then_delete(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", "resets", stdin="".join(f"{i}\n" for i in range(10)))
    tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", "resets", "--from-beginning", "--max-messages", "10",
         "--group", "to-reset")
    reset = tool(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--to-offset", "4", "--group", "to-reset",
                 "--topic", "resets", "--execute")
    assert re.search(r"to-reset\s+resets\s+0\s+4", reset), reset
    described = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", "to-reset")
    assert re.search(r"to-reset\s+resets\s+0\s+4\s+10\s+6", described), described
    assert "to-reset" in tool(GROUPS, "--bootstrap-server", b, "--list").split()
    assert "was successful" in tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", "to-reset")
    assert "to-reset" not in tool(GROUPS, "--bootstrap-server", b, "--list").split()


def test_kafka_configs_alters_and_describes_a_topic(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "configured", "--partitions", "1")
    tool(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "configured", "--alter",
         "--add-config", "retention.ms=1000000,cleanup.policy=compact")
    described = tool(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "configured",
                     "--describe")
    assert "retention.ms=1000000" in described and "cleanup.policy=compact" in described
    tool(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "configured", "--alter",
         "--delete-config", "retention.ms")
    assert "retention.ms" not in tool(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics",
                                      "--entity-name", "configured", "--describe")


def test_get_offsets_and_delete_records(broker: BrokerThread, tmp_path: Path) -> None:
    b = broker.bootstrap_servers
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", "trimmed", stdin="".join(f"{i}\n" for i in range(30)))
    assert offsets(broker, "trimmed") == {0: 30}
    assert offsets(broker, "trimmed", "-2") == {0: 0}
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "trimmed", "partition": 0, "offset": 12}]}))
    out = tool(DELETE_RECORDS, "--bootstrap-server", b, "--offset-json-file", str(plan))
    assert "low_watermark: 12" in out, out
    assert offsets(broker, "trimmed", "-2") == {0: 12}


def test_producer_and_consumer_perf_tests(broker: BrokerThread) -> None:
    b = broker.bootstrap_servers
    out = tool(PRODUCER_PERF, "--topic", "perf", "--num-records", "20000", "--record-size", "200",
               "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "compression.type=lz4", "acks=all")
    assert "20000 records sent" in out
    assert offsets(broker, "perf") == {0: 20000}
    out = tool(CONSUMER_PERF, "--bootstrap-server", b, "--topic", "perf", "--messages", "20000")
    header, row = out.strip().splitlines()[-2:]
    assert dict(zip(header.split(", "), row.split(", ")))["data.consumed.in.nMsg"] == "20000"
