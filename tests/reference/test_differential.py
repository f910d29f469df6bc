"""Differential tests: the same requests, byte for byte, to Apache Kafka and to pulllog.

Each case sends exact requests (kio entities through tests/kafka_wire.py) to both brokers and
compares the answers field by field after normalizing what legitimately differs: ids, hosts,
ports, throttle times, timestamps and error messages (the code is the contract, the text is
not). A difference that is deliberate belongs in the README's "Differences from Apache Kafka"
table, not here.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kafka_wire import WireClient

_ids = itertools.count()

# Fields whose values differ between any two brokers without a client noticing a difference
# in behaviour.
_IGNORED = {"throttle_time_ms", "node_id", "host", "port", "cluster_id", "controller_id", "topic_id",
            "error_message", "leader_id", "leader_epoch", "rack", "timestamp", "log_append_time_ms",
            "log_start_offset", "topic_authorized_operations", "cluster_authorized_operations",
            "current_leader", "node_endpoints", "brokers", "throttle_time", "replica_nodes", "isr_nodes",
            "offline_replicas", "eligible_leader_replicas", "last_known_elr"}


def _records(data: bytes) -> list[bytes]:
    """A fetched records section, batch by batch, with each batch's partitionLeaderEpoch (bytes
    12-15, outside the CRC) zeroed: it is the broker's leader epoch, 0 on a fresh Kafka
    partition and -1 on pulllog, which has no leader elections."""
    batches, pos = [], 0
    while pos + 12 <= len(data):
        size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        batch = bytearray(data[pos:pos + size])
        batch[12:16] = b"\0\0\0\0"
        batches.append(bytes(batch))
        pos += size
    return batches


def normalize(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and hasattr(value, "records") and hasattr(value, "high_watermark"):
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "records"}
        fields["records"] = _records(value.records or b"")
        return fields
    if dataclasses.is_dataclass(value) and hasattr(value, "configs") and hasattr(value, "resource_name"):
        # DescribeConfigs: by name (the order is not part of the contract), restricted like
        # CreateTopics' configs below to the names pulllog reports.
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "configs"}
        fields["configs"] = {c.name: normalize(c) for c in value.configs}
        return fields
    if dataclasses.is_dataclass(value) and hasattr(value, "configs") and hasattr(value, "num_partitions"):
        # CreateTopics v5+ answers with the new topic's configs. pulllog reports the configs it
        # implements; Kafka also reports replication and tiered-storage ones (the README's
        # "Differences from Apache Kafka"). Compared: pulllog's configs, by name, against Kafka's.
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "configs"}
        fields["configs"] = {c.name: normalize(c) for c in value.configs}
        # Kafka 4 in KRaft mode writes min.insync.replicas as a cluster-wide dynamic default when
        # the storage is formatted, so it reports source DYNAMIC_DEFAULT_BROKER_CONFIG (3) where
        # pulllog, with nothing set, reports DEFAULT_CONFIG (5): the value is the same.
        if "min.insync.replicas" in fields["configs"]:
            fields["configs"]["min.insync.replicas"].pop("config_source", None)
        return fields
    if dataclasses.is_dataclass(value):
        return {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in _IGNORED}
    if isinstance(value, (tuple, list)):
        return [normalize(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, uuid.UUID):
        return "<uuid>"
    return value


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}-{uuid.uuid4().hex[:6]}"


def create_topics(names_and_partitions: list[tuple[str, int]], *, validate_only: bool = False,
                  configs: dict[str, str] | None = None) -> Callable[[WireClient], Any]:
    def run(c: WireClient) -> Any:
        return c.call("create_topics", 7, {
            "topics": [{"name": n, "num_partitions": p, "replication_factor": -1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
                       for n, p in names_and_partitions],
            "timeout_ms": 10_000, "validate_only": validate_only})
    return run


def metadata(topic: str, *, auto_create: bool) -> Callable[[WireClient], Any]:
    def run(c: WireClient) -> Any:
        return c.call("metadata", 12, {"topics": [{"name": topic, "topic_id": None}],
                                       "allow_auto_topic_creation": auto_create,
                                       "include_topic_authorized_operations": False})
    return run


def created(topic: str, partitions: int = 1) -> Callable[[WireClient], Any]:
    """CreateTopics, then wait until the broker leads every partition: Kafka creates topics
    asynchronously (the controller decides, the broker learns it from the metadata log), so a
    request right after CreateTopics may find no partition yet. Waits on that state."""
    def run(c: WireClient) -> Any:
        answer = create_topics([(topic, partitions)])(c)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            meta = metadata(topic, auto_create=False)(c)
            parts = meta.topics[0].partitions
            if meta.topics[0].error_code == 0 and len(parts) == partitions and all(p.leader_id >= 0 for p in parts):
                return answer
            time.sleep(0.05)
        raise AssertionError(f"{topic} has no leader 30 s after CreateTopics")
    return run


def coordinator(group: str) -> Callable[[WireClient], Any]:
    """FindCoordinator until the broker coordinates ``group``: Kafka creates __consumer_offsets
    on the first request and answers COORDINATOR_NOT_AVAILABLE until its partition is loaded
    (a state to wait for, as clients do)."""
    def run(c: WireClient) -> Any:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = c.call("find_coordinator", 4, {"key_type": 0, "coordinator_keys": [group]})
            if answer.coordinators[0].error_code == 0:
                return answer
            time.sleep(0.05)
        raise AssertionError(f"no coordinator for {group} within 30 s")
    return run


def list_offsets(topic: str, partition: int, timestamp: int) -> Callable[[WireClient], Any]:
    def run(c: WireClient) -> Any:
        return c.call("list_offsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]})
    return run


def delete_topics(names: list[str]) -> Callable[[WireClient], Any]:
    def run(c: WireClient) -> Any:
        return c.call("delete_topics", 6, {"topics": [{"name": n, "topic_id": None} for n in names],
                                           "timeout": 10_000})
    return run


def both(kafka_reference_broker: Any, pulllog_session_broker: Any, build: Callable[[str], list[Callable[[WireClient], Any]]]
         ) -> tuple[list[Any], list[Any]]:
    """Run the steps ``build(topic)`` makes against each broker (same topic name on both)."""
    topic = unique("diff")
    results = []
    for port in (kafka_reference_broker.port, pulllog_session_broker.port):
        with WireClient(port) as c:
            results.append([normalize(step(c)) for step in build(topic)])
    return results[0], results[1]


CASES: dict[str, Callable[[str], list[Callable[[WireClient], Any]]]] = {
    "create: a name with an illegal character": lambda t: [create_topics([(t + "/x", 1)])],
    "create: a name of 250 characters": lambda t: [create_topics([(t + "x" * (250 - len(t)), 1)])],
    "create: the names . and ..": lambda t: [create_topics([(".", 1), ("..", 1)])],
    "create: zero partitions": lambda t: [create_topics([(t, 0)])],
    "create: validate_only creates nothing": lambda t: [create_topics([(t, 2)], validate_only=True),
                                                         metadata(t, auto_create=False)],
    "create: twice": lambda t: [create_topics([(t, 1)]), create_topics([(t, 1)])],
    "create: an unknown config": lambda t: [create_topics([(t, 1)], configs={"no.such.config": "1"})],
    "create: a bad config value": lambda t: [create_topics([(t, 1)], configs={"retention.ms": "soon"})],
    "metadata: a missing topic, no auto-create": lambda t: [metadata(t, auto_create=False)],
    "list offsets: earliest and latest of an empty topic": lambda t: [
        created(t), list_offsets(t, 0, -2), list_offsets(t, 0, -1)],
    "list offsets: a partition that does not exist": lambda t: [created(t), list_offsets(t, 3, -1)],
    "delete: a topic that does not exist": lambda t: [delete_topics([t])],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_answers_as_kafka_does(case: str, kafka_reference_broker: Any, pulllog_session_broker: Any) -> None:
    kafka, pulllog = both(kafka_reference_broker, pulllog_session_broker, CASES[case])
    _restrict_configs(kafka, pulllog)
    assert pulllog == kafka


def _restrict_configs(kafka: Any, pulllog: Any) -> None:
    """Keep, in Kafka's CreateTopics configs, the names pulllog reports (see normalize)."""
    if isinstance(kafka, dict) and isinstance(pulllog, dict):
        if isinstance(kafka.get("configs"), dict) and isinstance(pulllog.get("configs"), dict):
            kafka["configs"] = {k: v for k, v in kafka["configs"].items() if k in pulllog["configs"]}
        for key in kafka.keys() & pulllog.keys():
            _restrict_configs(kafka[key], pulllog[key])
    elif isinstance(kafka, list) and isinstance(pulllog, list):
        for k, p in zip(kafka, pulllog):
            _restrict_configs(k, p)
