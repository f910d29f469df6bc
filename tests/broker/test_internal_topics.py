"""__consumer_offsets is the broker's: clients cannot produce to it, create it, resize it,
delete it or make it non-compacted (issue 12, item 7). The CLI says so in one line.

Kafka 4.1.1, run as the reference: a client's Produce is refused with INVALID_TOPIC_EXCEPTION
(here the same); CreateTopics of an absent __consumer_offsets, CreatePartitions, DeleteTopics
and cleanup.policy=delete are accepted, and after the delete its groups find no coordinator.
pulllog refuses them (README: differences from Apache Kafka).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kafka_wire import WireClient, produce

from pulllog.cli.main import main
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

OFFSETS = "__consumer_offsets"
NONE, INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_CONFIG, INVALID_REQUEST = 0, 17, 36, 40, 42


def commit(c: WireClient, group: str, topic: str, offset: int) -> None:
    """An OffsetCommit outside group management: the broker creates __consumer_offsets for it."""
    create(c, topic)
    answer = c.call("offset_commit", 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                         "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                             {"partition_index": 0, "committed_offset": offset,
                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [NONE]


def committed(c: WireClient, group: str, topic: str) -> int:
    answer = c.call("offset_fetch", 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                        "require_stable": False})
    return int(answer.topics[0].partitions[0].committed_offset)


def create(c: WireClient, name: str, configs: dict[str, str] | None = None) -> int:
    answer = c.call("create_topics", 7, {
        "topics": [{"name": name, "num_partitions": 3, "replication_factor": -1, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 10_000, "validate_only": False})
    return int(answer.topics[0].error_code)


def alter(c: WireClient, configs: dict[str, str], *, incremental: bool = True) -> int:
    if incremental:
        answer = c.call("incremental_alter_configs", 1, {"resources": [{
            "resource_type": 2, "resource_name": OFFSETS,
            "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}],
            "validate_only": False})
    else:
        answer = c.call("alter_configs", 2, {"resources": [{
            "resource_type": 2, "resource_name": OFFSETS,
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False})
    return int(answer.responses[0].error_code)


def cleanup_policy(c: WireClient) -> str:
    answer = c.call("describe_configs", 4, {"resources": [{"resource_type": 2, "resource_name": OFFSETS,
                                                           "configuration_keys": ["cleanup.policy"]}],
                                            "include_synonyms": False, "include_documentation": False})
    return str(answer.results[0].configs[0].value)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with BrokerThread(tmp_path / "data") as b:
        with WireClient(b.port) as c:
            commit(c, "billing", "orders", 42)
        yield b


def test_a_client_cannot_produce_to_consumer_offsets(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        answer = produce(c, OFFSETS, 0, build_batch([(b"k", b"v")]))
        assert [int(p.error_code) for t in answer.responses for p in t.partition_responses] == [INVALID_TOPIC_EXCEPTION]

    kcat = subprocess.run(["kcat", "-b", broker.bootstrap_servers, "-P", "-t", OFFSETS, "-p", "0"],
                          input=b"garbage\n", capture_output=True, timeout=60)
    assert kcat.returncode != 0 and b"nvalid" in kcat.stderr, kcat.stderr
    with WireClient(broker.port) as c:
        assert committed(c, "billing", "orders") == 42


def test_a_client_cannot_create_consumer_offsets(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as broker, WireClient(broker.port) as c:
        assert create(c, OFFSETS, {"cleanup.policy": "delete"}) == INVALID_REQUEST
        commit(c, "billing", "orders", 42)  # the broker creates it, compacted
        assert cleanup_policy(c) == "compact"
        assert create(c, OFFSETS) == TOPIC_ALREADY_EXISTS  # as Kafka, once it exists


def test_consumer_offsets_stays_compacted(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        assert alter(c, {"cleanup.policy": "delete"}) == INVALID_CONFIG
        assert alter(c, {"cleanup.policy": "compact,delete"}) == INVALID_CONFIG
        assert alter(c, {"segment.ms": "600000"}, incremental=False) == INVALID_CONFIG  # drops cleanup.policy
        assert cleanup_policy(c) == "compact"
        assert alter(c, {"segment.ms": "600000"}) == NONE  # other configs may change


def test_a_client_cannot_delete_consumer_offsets_or_change_its_partition_count(broker: BrokerThread) -> None:
    with WireClient(broker.port) as c:
        answer = c.call("delete_topics", 6, {"topics": [{"name": OFFSETS, "topic_id": None}], "timeout": 10_000})
        assert int(answer.responses[0].error_code) == INVALID_REQUEST
        answer = c.call("create_partitions", 3, {"topics": [{"name": OFFSETS, "count": 60, "assignments": None}],
                                                 "timeout": 5000, "validate_only": False})
        assert int(answer.results[0].error_code) == INVALID_REQUEST
        assert committed(c, "billing", "orders") == 42


def cli(broker: BrokerThread, *args: str) -> str:
    result = CliRunner(env={"PULLLOG_BOOTSTRAP_SERVERS": None}).invoke(
        main, ["topic", *args, "--bootstrap-server", broker.bootstrap_servers])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    return line


def test_the_cli_refuses_in_one_line(broker: BrokerThread) -> None:
    assert "internal topic" in cli(broker, "delete", OFFSETS)
    assert cli(broker, "create", OFFSETS) == f"error: topic '{OFFSETS}' already exists"
    assert "cleanup.policy=compact" in cli(broker, "alter", OFFSETS, "--config", "cleanup.policy=delete")
    assert "internal topic" in cli(broker, "alter", OFFSETS, "--partitions", "60")
    with WireClient(broker.port) as c:
        assert committed(c, "billing", "orders") == 42
