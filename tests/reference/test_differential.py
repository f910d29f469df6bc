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
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from crc32c import crc32c
from kafka_wire import WireClient
from kafka_wire import fetch as wire_fetch

from pulllog.records import build_batch

_ids = itertools.count()

# Fields whose values differ between any two brokers without a client noticing a difference
# in behaviour.
_IGNORED = {"throttle_time_ms", "node_id", "host", "port", "cluster_id", "controller_id", "topic_id",
            "error_message", "leader_id", "leader_epoch", "rack", "timestamp", "log_append_time_ms",
            "log_start_offset", "topic_authorized_operations", "cluster_authorized_operations",
            "current_leader", "node_endpoints", "brokers", "throttle_time", "replica_nodes", "isr_nodes",
            "offline_replicas", "eligible_leader_replicas", "last_known_elr", "producer_id",
            # Kafka answers a duplicate batch (idempotence) with the stored batch's timestamp as its
            # log_append_time even on a CreateTime topic; pulllog with -1 (a timestamp either way).
            "log_append_time"}


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


# Member ids are "<client id>-<uuid>" (static members: "<group instance id>-<uuid>") on both
# brokers: the uuid differs.
_MEMBER_ID = re.compile(r"(wire-test|i-1)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize(value: Any) -> Any:
    if isinstance(value, str) and _MEMBER_ID.fullmatch(value):
        return "<member id>"
    if dataclasses.is_dataclass(value) and getattr(value, "resource_type", None) == BROKER and value.resource_name:
        # A broker as a config resource is named by its id (1 on Kafka's side, 0 on pulllog's).
        value = dataclasses.replace(value, resource_name="<this broker>")
    if dataclasses.is_dataclass(value) and hasattr(value, "records") and hasattr(value, "high_watermark"):
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "records"}
        fields["records"] = _records(value.records or b"")
        if fields.get("error_code") == "offset_out_of_range":
            # Kafka answers -1 for these; pulllog the real offsets (README: differences).
            fields.pop("high_watermark")
            fields.pop("last_stable_offset")
        return fields
    if dataclasses.is_dataclass(value) and hasattr(value, "configs") and hasattr(value, "resource_name"):
        # DescribeConfigs: by name (the order is not part of the contract), restricted like
        # CreateTopics' configs below to the names pulllog reports.
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "configs"}
        fields["configs"] = {c.name: normalize(c) for c in value.configs}
        _unformatted_min_insync(fields["configs"])
        return fields
    if dataclasses.is_dataclass(value) and hasattr(value, "configs") and hasattr(value, "num_partitions"):
        # CreateTopics v5+ answers with the new topic's configs. pulllog reports the configs it
        # implements; Kafka also reports replication and tiered-storage ones (the README's
        # "Differences from Apache Kafka"). Compared: pulllog's configs, by name, against Kafka's.
        fields = {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if f.name not in _IGNORED and f.name != "configs"}
        fields["configs"] = {c.name: normalize(c) for c in value.configs}
        _unformatted_min_insync(fields["configs"])
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


def _unformatted_min_insync(configs: dict[str, Any]) -> None:
    """Kafka 4 in KRaft mode writes min.insync.replicas as a cluster-wide dynamic default when
    the storage is formatted, so it reports source DYNAMIC_DEFAULT_BROKER_CONFIG (3) and that
    synonym where pulllog, with nothing set, reports DEFAULT_CONFIG (5): the value is the same."""
    if "min.insync.replicas" in configs:
        configs["min.insync.replicas"].pop("config_source", None)
        configs["min.insync.replicas"].pop("synonyms", None)


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


def ignored(step: Callable[[WireClient], Any]) -> Callable[[WireClient], Any]:
    """Run ``step`` for its effect; its answer is not compared."""
    def run(c: WireClient) -> None:
        step(c)
    return run


def led(topic: str, partitions: int = 1) -> Callable[[WireClient], Any]:
    """Metadata (no auto-create) until the broker leads every partition of ``topic``."""
    def run(c: WireClient) -> Any:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            meta = metadata(topic, auto_create=False)(c)
            parts = meta.topics[0].partitions
            if meta.topics[0].error_code == 0 and len(parts) == partitions and all(p.leader_id >= 0 for p in parts):
                return meta
            time.sleep(0.05)
        raise AssertionError(f"{topic} has no leader for its {partitions} partitions within 30 s")
    return run


def created(topic: str, partitions: int = 1) -> Callable[[WireClient], Any]:
    """CreateTopics, then wait until the broker leads every partition: Kafka creates topics
    asynchronously (the controller decides, the broker learns it from the metadata log), so a
    request right after CreateTopics may find no partition yet. Waits on that state."""
    def run(c: WireClient) -> Any:
        answer = create_topics([(topic, partitions)])(c)
        led(topic, partitions)(c)
        return answer
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


def call(api: str, version: int, data: dict[str, Any]) -> Callable[[WireClient], Any]:
    return lambda c: c.call(api, version, data)


def produce(topic: str, partition: int, records: bytes | None, *, acks: int = 1) -> Callable[[WireClient], Any]:
    return call("produce", 9, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})


def fetch(topic: str, partition: int, offset: int, **limits: int) -> Callable[[WireClient], Any]:
    return lambda c: wire_fetch(c, topic, partition, offset, **limits)


def group_of(topic: str) -> str:
    return "grp-" + topic


THREE = build_batch([(b"k", b"v" * 50)] * 3)
_BAD_CRC = bytearray(build_batch([(b"k", b"w" * 50)]))
_BAD_CRC[-1] ^= 0xFF
BAD_CRC = bytes(_BAD_CRC)


def _empty_batch() -> bytes:
    """A v2 batch with a valid CRC and no records at all (the 61-byte header alone)."""
    header = bytearray(build_batch([(b"k", b"v")])[:61])
    header[8:12] = (61 - 12).to_bytes(4, "big")
    header[57:61] = b"\0\0\0\0"
    header[17:21] = crc32c(bytes(header[21:])).to_bytes(4, "big")
    return bytes(header)


EMPTY_BATCH = _empty_batch()
# No records and lastOffsetDelta -1 (what a writer that counts from the records makes): an
# offset range of no offsets.
EMPTY_BATCH_NO_OFFSETS = build_batch([])


@dataclasses.dataclass
class Member:
    """One group member's ids as a session learns them from the coordinator's answers (one
    instance per broker: a case's steps are built once per broker)."""

    group: str
    instance_id: str | None = None
    member_id: str = ""
    generation: int = -1

    def join(self) -> Callable[[WireClient], Any]:
        def run(c: WireClient) -> Any:
            answer = c.call("join_group", 9, {
                "group_id": self.group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                "member_id": self.member_id, "group_instance_id": self.instance_id, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"\0\0\0\0\0\0\0\0\0\0"}], "reason": None})
            if answer.error_code in (0, 79):  # NONE, MEMBER_ID_REQUIRED
                self.member_id = answer.member_id
            if answer.error_code == 0:
                self.generation = answer.generation_id
            return answer
        return run

    def joined(self) -> Callable[[WireClient], Any]:
        """FindCoordinator, then JoinGroup until a member (MEMBER_ID_REQUIRED first when dynamic)."""
        def run(c: WireClient) -> Any:
            coordinator(self.group)(c)
            answers = [self.join()(c)]
            deadline = time.monotonic() + 30
            # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR: the group's offsets partition is
            # still loading on a fresh broker; clients retry both.
            while answers[-1].error_code in (14, 16) and time.monotonic() < deadline:
                time.sleep(0.05)
                answers = [self.join()(c)]
            if answers[-1].error_code == 79:
                answers.append(self.join()(c))
            return answers
        return run

    def sync(self, skew: int = 0) -> Callable[[WireClient], Any]:
        """SyncGroup with the generation learned, plus ``skew`` (read when the step runs)."""
        return lambda c: c.call("sync_group", 5, {
            "group_id": self.group, "generation_id": self.generation + skew,
            "member_id": self.member_id, "group_instance_id": self.instance_id, "protocol_type": "consumer",
            "protocol_name": "range", "assignments": [{"member_id": self.member_id, "assignment": b""}]})

    def heartbeat(self, skew: int = 0) -> Callable[[WireClient], Any]:
        return lambda c: c.call("heartbeat", 4, {
            "group_id": self.group, "generation_id": self.generation + skew,
            "member_id": self.member_id, "group_instance_id": self.instance_id})

    def commit(self, topic: str, offset: int, skew: int = 0) -> Callable[[WireClient], Any]:
        return lambda c: c.call("offset_commit", 8, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation + skew,
            "member_id": self.member_id, "group_instance_id": self.instance_id, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]})

    def leave(self) -> Callable[[WireClient], Any]:
        return lambda c: c.call("leave_group", 5, {"group_id": self.group, "members": [
            {"member_id": self.member_id, "group_instance_id": self.instance_id, "reason": None}]})


class Rejoin:
    """A second member's JoinGroup on its own connection, waiting in the background: it starts
    a rebalance that completes only when the other members join again."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.answers: list[Any] = []
        self.thread: threading.Thread | None = None

    def start(self) -> Callable[[WireClient], Any]:
        def run(c: WireClient) -> Any:
            port = c.sock.getpeername()[1]
            first = self.member.join()(c)  # MEMBER_ID_REQUIRED: answered at once

            def wait_for_join() -> None:
                with WireClient(port) as own:
                    self.answers.append(self.member.join()(own))
            self.thread = threading.Thread(target=wait_for_join, daemon=True)
            self.thread.start()
            _wait_for_state(c, self.member.group, "PreparingRebalance")
            return first
        return run

    def joined(self) -> Callable[[WireClient], Any]:
        def run(c: WireClient) -> Any:
            assert self.thread is not None
            self.thread.join(30)
            return self.answers
        return run


def _wait_for_state(c: WireClient, group: str, state: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if described_group(group)(c).groups[0].group_state == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"group {group} not {state} within 30 s")


def group_listed(group: str, states: list[str] | None = None) -> Callable[[WireClient], Any]:
    """ListGroups (v4, with a states filter), restricted to ``group`` (the brokers hold others)."""
    def run(c: WireClient) -> Any:
        answer = c.call("list_groups", 4, {"states_filter": states or []})
        return answer.error_code, [g for g in answer.groups if g.group_id == group]
    return run


def simple_commit(group: str, topic: str, partition: int = 0, offset: int = 1) -> Callable[[WireClient], Any]:
    """OffsetCommit outside group management (generation -1, no member id)."""
    return call("offset_commit", 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                     "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                         {"partition_index": partition, "committed_offset": offset,
                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


def describe_configs(resource_type: int, name: str, keys: list[str] | None, *, synonyms: bool = False
                     ) -> Callable[[WireClient], Any]:
    return call("describe_configs", 4, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                       "configuration_keys": keys}],
                                        "include_synonyms": synonyms, "include_documentation": False})


def alter_configs(resource_type: int, name: str, ops: list[tuple[str, int, str | None]], *,
                  validate_only: bool = False) -> Callable[[WireClient], Any]:
    """IncrementalAlterConfigs; ``ops`` are (name, operation, value): 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT."""
    return call("incremental_alter_configs", 1, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in ops]}],
        "validate_only": validate_only})


def create_partitions(topic: str, count: int, *, assignments: list[list[int]] | None = None,
                      validate_only: bool = False) -> Callable[[WireClient], Any]:
    return call("create_partitions", 3, {"topics": [{"name": topic, "count": count, "assignments": None if assignments is None
                                                     else [{"broker_ids": b} for b in assignments]}],
                                         "timeout": 5000, "validate_only": validate_only})


def delete_records(topic: str, partition: int, offset: int) -> Callable[[WireClient], Any]:
    return call("delete_records", 2, {"topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "offset": offset}]}], "timeout": 5000})


TOPIC, BROKER = 2, 4  # DescribeConfigs resource types


def node_id(c: WireClient) -> int:
    """This broker's id (Kafka's reference broker is 1, pulllog's 0)."""
    return int(c.call("metadata", 12, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}).brokers[0].node_id)


def described_when(resource_type: int, name: str, key: str, value: str) -> Callable[[WireClient], Any]:
    """DescribeConfigs (with synonyms) until ``key`` is ``value``: Kafka applies a dynamic
    broker config when the broker reads it back from the metadata log, after answering."""
    def run(c: WireClient) -> Any:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = describe_configs(resource_type, name, [key], synonyms=True)(c)
            if [e.value for e in answer.results[0].configs] == [value]:
                return answer
            time.sleep(0.05)
        raise AssertionError(f"{key} of {name!r} is not {value} within 30 s")
    return run


def on_this_broker(make: Callable[[str], Callable[[WireClient], Any]]) -> Callable[[WireClient], Any]:
    """A step about this broker as a config resource (its id as the resource name)."""
    return lambda c: make(str(node_id(c)))(c)


def create_assigned(topic: str, partitions: int) -> Callable[[WireClient], Any]:
    """CreateTopics with a manual replica assignment: every partition on this broker."""
    def run(c: WireClient) -> Any:
        me = node_id(c)
        return c.call("create_topics", 7, {"topics": [{
            "name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": i, "broker_ids": [me]} for i in range(partitions)]}],
            "timeout_ms": 10_000, "validate_only": False})
    return run


def add_assigned(topic: str, count: int, existing: int) -> Callable[[WireClient], Any]:
    def run(c: WireClient) -> Any:
        return create_partitions(topic, count, assignments=[[node_id(c)]] * (count - existing))(c)
    return run


def authorized(topic: str) -> Callable[[WireClient], Any]:
    return call("metadata", 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": True})


def cluster_authorized() -> Callable[[WireClient], Any]:
    """Metadata v10 is the last to carry cluster_authorized_operations (KIP-700)."""
    def run(c: WireClient) -> Any:
        return c.call("metadata", 10, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_cluster_authorized_operations": True,
                                       "include_topic_authorized_operations": False}).cluster_authorized_operations
    return run


def described_group(group: str, *, operations: bool = False) -> Callable[[WireClient], Any]:
    return call("describe_groups", 5, {"groups": [group], "include_authorized_operations": operations})


def group_authorized(group: str) -> Callable[[WireClient], Any]:
    return lambda c: described_group(group, operations=True)(c).groups[0].authorized_operations


def topic_authorized(topic: str) -> Callable[[WireClient], Any]:
    return lambda c: authorized(topic)(c).topics[0].topic_authorized_operations


def _cases_groups(t: str) -> list[Callable[[WireClient], Any]]:
    return []


def init_producer_id(transactional_id: str | None = None) -> Callable[[WireClient], Any]:
    return call("init_producer_id", 4, {"transactional_id": transactional_id, "transaction_timeout": 60_000,
                                        "producer_id": -1, "producer_epoch": -1})


@dataclasses.dataclass
class Producer:
    """An idempotent producer's id and epoch, learned from InitProducerId."""

    producer_id: int = -1
    epoch: int = -1

    def init(self) -> Callable[[WireClient], Any]:
        """InitProducerId until it answers: Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its
        producer id manager has a block of ids (a state to wait for, as producers do)."""
        def run(c: WireClient) -> Any:
            deadline = time.monotonic() + 30
            answer = init_producer_id()(c)
            while answer.error_code == 14 and time.monotonic() < deadline:
                time.sleep(0.05)
                answer = init_producer_id()(c)
            self.producer_id, self.epoch = int(answer.producer_id), int(answer.producer_epoch)
            return answer
        return run

    def produce(self, topic: str, sequence: int, *, epoch_skew: int = 0, records: int = 2
                ) -> Callable[[WireClient], Any]:
        """Produce with the id and epoch learned (plus ``epoch_skew``, read when the step runs)."""
        def run(c: WireClient) -> Any:
            batch = build_batch([(b"k", b"v")] * records, producer_id=self.producer_id,
                                producer_epoch=self.epoch + epoch_skew, base_sequence=sequence)
            return produce(topic, 0, batch)(c)
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


Steps = list[Callable[[WireClient], Any]]


def _idempotent_in_sequence_duplicate_gap(t: str) -> Steps:
    p = Producer()
    return [created(t), p.init(), p.produce(t, 0), p.produce(t, 2), p.produce(t, 2), p.produce(t, 9),
            list_offsets(t, 0, -1)]


def _idempotent_first_sequence_not_zero(t: str) -> Steps:
    p = Producer()
    return [created(t), p.init(), p.produce(t, 5)]


def _idempotent_old_epoch(t: str) -> Steps:
    p = Producer()
    return [created(t), p.init(), p.produce(t, 0), p.produce(t, 0, epoch_skew=+1), p.produce(t, 2),
            p.produce(t, 2, epoch_skew=+1)]


def _group_lone_member(t: str) -> Steps:
    m = Member(group_of(t))
    return [created(t), m.joined(), m.sync(), described_group(m.group), group_listed(m.group, ["Stable"]),
            m.heartbeat(), m.commit(t, 2), m.leave(), described_group(m.group), group_listed(m.group)]


def _group_illegal_generation(t: str) -> Steps:
    m = Member(group_of(t))
    return [created(t), m.joined(), m.sync(), m.heartbeat(+1), m.sync(+1), m.commit(t, 1, +1), m.heartbeat(-1)]


def _group_unknown_member_syncs(t: str) -> Steps:
    m = Member(group_of(t))
    return [m.joined(), Member(m.group, member_id="m", generation=1).sync()]


def _group_rebalance_in_progress(t: str) -> Steps:
    m, other = Member(group_of(t)), Rejoin(Member(group_of(t)))
    return [created(t), m.joined(), m.sync(), other.start(), m.heartbeat(), described_group(m.group),
            m.commit(t, 1), m.join(), other.joined(), m.heartbeat()]


def _group_fenced_static_member(t: str) -> Steps:
    m = Member(group_of(t), instance_id="i-1")
    return [created(t), m.joined(), m.sync(),
            Member(m.group, instance_id="i-1", member_id="an-old-member-id", generation=1).heartbeat(),
            Member(m.group, instance_id="i-1", member_id="an-old-member-id").join(),
            Member(m.group, instance_id="i-1", member_id="an-old-member-id", generation=1).commit(t, 1),
            m.heartbeat()]


def _group_static_member_rejoins(t: str) -> Steps:
    m = Member(group_of(t), instance_id="i-1")
    return [created(t), m.joined(), m.sync(), Member(m.group, instance_id="i-1").join(), m.heartbeat()]


def _delete_groups_with_members_then_empty(t: str) -> Steps:
    m = Member(group_of(t))
    return [m.joined(), m.sync(), call("delete_groups", 2, {"groups_names": [m.group]}), m.leave(),
            call("delete_groups", 2, {"groups_names": [m.group]}), described_group(m.group)]


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
    "produce: to a partition that does not exist": lambda t: [created(t), produce(t, 5, THREE)],
    "produce: a bad CRC": lambda t: [created(t), produce(t, 0, BAD_CRC)],
    # Only the broker writes its internal topics (Kafka's ReplicaManager). __consumer_offsets
    # exists on both after these steps: Kafka creates it for FindCoordinator, pulllog for the
    # first commit (whose answer is not compared: a fresh Kafka may still be loading it).
    "produce: to __consumer_offsets": lambda t: [
        created(t), coordinator(group_of(t)), ignored(simple_commit(group_of(t), t)),
        produce("__consumer_offsets", 0, THREE)],
    "create: __consumer_offsets once it exists": lambda t: [
        created(t), coordinator(group_of(t)), ignored(simple_commit(group_of(t), t)),
        create_topics([("__consumer_offsets", 1)])],
    "produce: a batch of no records": lambda t: [created(t), produce(t, 0, EMPTY_BATCH)],
    "produce: a batch of no records, lastOffsetDelta -1": lambda t: [created(t), produce(t, 0, EMPTY_BATCH_NO_OFFSETS)],
    "produce: a batch of no records after a good one": lambda t: [created(t), produce(t, 0, THREE + EMPTY_BATCH)],
    "idempotent: in sequence, a duplicate, a gap": _idempotent_in_sequence_duplicate_gap,
    "idempotent: a first sequence that is not 0": _idempotent_first_sequence_not_zero,
    "idempotent: an old epoch after a bump": _idempotent_old_epoch,
    "produce: acks=2": lambda t: [created(t), produce(t, 0, THREE, acks=2)],
    "produce: over max.message.bytes": lambda t: [created(t), produce(t, 0, build_batch([(None, b"x" * 1_100_000)]))],
    "produce then fetch": lambda t: [created(t), produce(t, 0, THREE), fetch(t, 0, 0)],
    "fetch: offset out of range": lambda t: [created(t), produce(t, 0, THREE), fetch(t, 0, 10)],
    "fetch: unknown partition": lambda t: [created(t), fetch(t, 4, 0)],
    "fetch: partition_max_bytes smaller than the first batch": lambda t: [
        created(t), produce(t, 0, THREE), produce(t, 0, THREE), fetch(t, 0, 0, partition_max_bytes=10)],
    "fetch: max_bytes smaller than the first batch": lambda t: [
        created(t), produce(t, 0, THREE), produce(t, 0, THREE), fetch(t, 0, 0, max_bytes=10)],
    "fetch: max_bytes room for one batch of two": lambda t: [
        created(t), produce(t, 0, THREE), produce(t, 0, THREE), fetch(t, 0, 0, max_bytes=len(THREE) + 10)],
    "fetch: at the log end, min_bytes with max_wait": lambda t: [
        created(t), produce(t, 0, THREE), fetch(t, 0, 3, min_bytes=1, max_wait_ms=50)],
    "fetch: min_bytes more than there is, with max_wait": lambda t: [
        created(t), produce(t, 0, THREE), fetch(t, 0, 0, min_bytes=1 << 20, max_wait_ms=50)],
    "list offsets: every spec of a topic with records": lambda t: [
        created(t), produce(t, 0, THREE), produce(t, 0, THREE),
        *(list_offsets(t, 0, spec) for spec in (-1, -2, -3, -4, -5, 0, 4_000_000_000_000))],
    "list offsets: max timestamp of an empty topic": lambda t: [created(t), list_offsets(t, 0, -3)],
    # The first answer differs (Kafka creates the topic asynchronously: see the README); what
    # the topic looks like once it exists does not.
    "metadata: a missing topic, auto-create": lambda t: [ignored(metadata(t, auto_create=True)), led(t)],
    "metadata: an invalid name, auto-create": lambda t: [metadata(t + "/x", auto_create=True)],
    "metadata: topic authorized operations": lambda t: [created(t), topic_authorized(t)],
    "metadata: cluster authorized operations": lambda t: [cluster_authorized()],
    "create: a manual assignment on this broker": lambda t: [create_assigned(t, 2), created(t, 2)],
    "create: message.format.version (deprecated)": lambda t: [
        create_topics([(t, 1)], configs={"message.format.version": "3.0-IV1"})],
    "create partitions: fewer": lambda t: [created(t, 2), create_partitions(t, 1)],
    "create partitions: the same count": lambda t: [created(t, 2), create_partitions(t, 2)],
    "create partitions: unknown topic": lambda t: [create_partitions(t, 3)],
    "create partitions: validate only": lambda t: [created(t), create_partitions(t, 3, validate_only=True),
                                                    metadata(t, auto_create=False)],
    "create partitions: a manual assignment on this broker": lambda t: [created(t), add_assigned(t, 3, 1),
                                                                         created(t, 3)],
    "create partitions: an assignment of the wrong length": lambda t: [created(t), create_partitions(
        t, 3, assignments=[[0]])],
    "delete: twice": lambda t: [created(t), delete_topics([t]), delete_topics([t])],
    "delete: an invalid name": lambda t: [delete_topics([t + "/x"])],
    "delete records: beyond the high watermark": lambda t: [created(t), produce(t, 0, THREE), delete_records(t, 0, 10)],
    "delete records: to the high watermark": lambda t: [created(t), produce(t, 0, THREE), delete_records(t, 0, -1),
                                                         list_offsets(t, 0, -2)],
    "delete records: a partition that does not exist": lambda t: [created(t), delete_records(t, 2, 0)],
    "describe configs: a topic, no synonyms": lambda t: [created(t), describe_configs(TOPIC, t, None)],
    "describe configs: a topic, synonyms": lambda t: [created(t), describe_configs(TOPIC, t, None, synonyms=True)],
    "describe configs: an overridden topic config, synonyms": lambda t: [
        created(t), alter_configs(TOPIC, t, [("segment.bytes", 0, "2000000")]),
        describe_configs(TOPIC, t, ["segment.bytes", "retention.ms"], synonyms=True)],
    "describe configs: unknown topic": lambda t: [describe_configs(TOPIC, t, None)],
    "alter configs: SET then DELETE": lambda t: [
        created(t), alter_configs(TOPIC, t, [("retention.ms", 0, "60000")]),
        describe_configs(TOPIC, t, ["retention.ms"]),
        alter_configs(TOPIC, t, [("retention.ms", 1, None)]), describe_configs(TOPIC, t, ["retention.ms"])],
    # (Not described between the two: pulllog lists cleanup.policy's values sorted, see the README.)
    "alter configs: APPEND and SUBTRACT a list": lambda t: [
        created(t), alter_configs(TOPIC, t, [("cleanup.policy", 2, "compact")]),
        alter_configs(TOPIC, t, [("cleanup.policy", 3, "delete")]), describe_configs(TOPIC, t, ["cleanup.policy"])],
    "alter configs: APPEND to a config that is not a list": lambda t: [
        created(t), alter_configs(TOPIC, t, [("retention.ms", 2, "1")])],
    "alter configs: SET without a value": lambda t: [created(t), alter_configs(TOPIC, t, [("retention.ms", 0, None)])],
    "alter configs: validate_only changes nothing": lambda t: [
        created(t), alter_configs(TOPIC, t, [("retention.ms", 0, "60000")], validate_only=True),
        describe_configs(TOPIC, t, ["retention.ms"])],
    "alter configs: the cluster-wide default of a broker log config": lambda t: [
        created(t), alter_configs(BROKER, "", [("log.retention.ms", 0, "3600000")]),
        described_when(TOPIC, t, "retention.ms", "3600000"),
        alter_configs(BROKER, "", [("log.retention.ms", 1, None)]),
        described_when(TOPIC, t, "retention.ms", "604800000")],
    "alter configs: this broker's log config over the cluster-wide one": lambda t: [
        created(t), alter_configs(BROKER, "", [("log.segment.bytes", 0, "50000000")]),
        described_when(TOPIC, t, "segment.bytes", "50000000"),
        on_this_broker(lambda me: alter_configs(BROKER, me, [("log.segment.bytes", 0, "60000000")])),
        described_when(TOPIC, t, "segment.bytes", "60000000"),
        on_this_broker(lambda me: described_when(BROKER, me, "log.segment.bytes", "60000000")),
        on_this_broker(lambda me: alter_configs(BROKER, me, [("log.segment.bytes", 1, None)])),
        alter_configs(BROKER, "", [("log.segment.bytes", 1, None)]),
        described_when(TOPIC, t, "segment.bytes", "1073741824")],
    "alter configs: a broker config that is not dynamic": lambda t: [
        alter_configs(BROKER, "", [("log.dirs", 0, "/tmp/elsewhere")])],
    "alter configs: a broker log config, validate_only": lambda t: [
        created(t), alter_configs(BROKER, "", [("log.retention.ms", 0, "3600000")], validate_only=True),
        describe_configs(TOPIC, t, ["retention.ms"], synonyms=True)],
    "alter configs: a bad value for a broker log config": lambda t: [
        alter_configs(BROKER, "", [("log.retention.ms", 0, "soon")])],
    "alter configs: an unknown name": lambda t: [created(t), alter_configs(TOPIC, t, [("no.such.config", 0, "1")])],
    "alter configs: a bad value": lambda t: [created(t), alter_configs(TOPIC, t, [("retention.ms", 0, "soon")])],
    "alter configs: an unknown topic": lambda t: [alter_configs(TOPIC, t, [("retention.ms", 0, "1")])],
    "offset commit: unknown topic": lambda t: [coordinator(group_of(t)), simple_commit(group_of(t), t)],
    "offset commit: unknown partition": lambda t: [coordinator(group_of(t)), created(t),
                                                    simple_commit(group_of(t), t, partition=3)],
    "offset commit then fetch (simple consumer)": lambda t: [
        coordinator(group_of(t)), created(t), simple_commit(group_of(t), t),
        call("offset_fetch", 8, {"groups": [{"group_id": group_of(t), "topics": None}], "require_stable": False})],
    "offset fetch: unknown group": lambda t: [coordinator(group_of(t)), call("offset_fetch", 8, {
        "groups": [{"group_id": group_of(t), "topics": [{"name": t, "partition_indexes": [0]}]}], "require_stable": False})],
    "offset delete: unknown group": lambda t: [coordinator(group_of(t)), call("offset_delete", 0, {
        "group_id": group_of(t), "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]})],
    "offset delete: an empty group's offsets": lambda t: [
        coordinator(group_of(t)), created(t), simple_commit(group_of(t), t),
        call("offset_delete", 0, {"group_id": group_of(t), "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]}),
        call("offset_fetch", 8, {"groups": [{"group_id": group_of(t), "topics": None}], "require_stable": False})],
    "group: a lone member joins, syncs, heartbeats, commits, leaves": _group_lone_member,
    "group: illegal generation": _group_illegal_generation,
    "group: sync by an unknown member of a live group": _group_unknown_member_syncs,
    "group: rebalance in progress": _group_rebalance_in_progress,
    "group: fenced static member": _group_fenced_static_member,
    "group: a static member rejoins with a new member id": _group_static_member_rejoins,
    "delete groups: a group with members, then empty": _delete_groups_with_members_then_empty,
    "heartbeat: unknown group": lambda t: [coordinator(group_of(t)),
                                           Member(group_of(t), member_id="m", generation=1).heartbeat()],
    "sync: unknown member": lambda t: [coordinator(group_of(t)), Member(group_of(t), member_id="m", generation=1).sync()],
    "leave: unknown group": lambda t: [coordinator(group_of(t)), Member(group_of(t), member_id="m").leave()],
    "join: no member id yet": lambda t: [coordinator(group_of(t)), Member(group_of(t)).join()],
    "describe groups: unknown group": lambda t: [coordinator(group_of(t)), described_group(group_of(t))],
    "describe groups: authorized operations": lambda t: [coordinator(group_of(t)), group_authorized(group_of(t))],
    "delete groups: unknown group": lambda t: [coordinator(group_of(t)), call("delete_groups", 2, {"groups_names": [group_of(t)]})],
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
