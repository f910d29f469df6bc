"""The admin client: topics, partitions, configs and offsets, over Kafka's admin APIs.

    async with Admin("127.0.0.1:9092") as admin:
        await admin.create_topic("events", partitions=3, configs={"retention.ms": "86400000"})
        topic = await admin.describe_topic("events")
        for p in topic.partitions:
            print(p.partition, p.leader, p.log_start_offset, p.log_end_offset, p.size_bytes)

Where each request goes, as Kafka wants it: CreateTopics, DeleteTopics, CreatePartitions,
ElectLeaders and Alter/ListPartitionReassignments to the controller (after a lost connection or NOT_CONTROLLER, as when the
controller's broker died, the controller is found again from Metadata and the request sent
again, every ``retry_backoff_ms``, until the request timeout); ListOffsets, DeleteRecords and
DescribeLogDirs to each partition's leader, one request per broker, all brokers at once;
DescribeConfigs / AlterConfigs for a broker resource to that broker, for a topic to any.

Transactions (KIP-664, what ``kafka-transactions.sh`` does): ``list_transactions`` asks every
broker (ListTransactions), ``describe_transactions`` each transactional id's coordinator
(FindCoordinator key type 1, DescribeTransactions), ``describe_producers`` each partition's
leader (DescribeProducers). ``abort_transaction`` ends a *hanging* transaction, one the
coordinator no longer knows about, so that the partition's last stable offset can move on:
it finds the producer's open transaction with DescribeProducers (by its start offset or its
producer id) and sends the leader WriteTxnMarkers with an abort marker for that partition
alone, with the producer's epoch and the coordinator epoch the partition last saw.
``find_hanging_transactions`` is the tool's ``find-hanging``: open transactions older than
the maximum transaction timeout whose coordinator does not list the partition.

Errors: a Kafka error code becomes the most specific ``KafkaError`` subclass
(``pulllog.client.errors.error_for``) with a message that names the topic or partition,
e.g. ``TopicAlreadyExistsError("topic 'x' already exists")``; an unknown topic is
``UnknownTopicError``. Calls that take several topics raise for the first that failed, after
the broker has applied the others.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from kio.schema.errors import ErrorCode

from .connection import KafkaConnection
from .cluster import DEFAULT_BOOTSTRAP, Cluster
from .errors import KafkaError, UnknownTopicError, UnsupportedByBrokerError, error_for
from .types import TopicPartition

__all__ = [
    "Admin",
    "BrokerNode",
    "ClusterDescription",
    "AlterConfigOp",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "CreatedTopic",
    "ElectionType",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "ListedOffset",
    "NewTopic",
    "OffsetSpec",
    "PartitionDescription",
    "PartitionReassignment",
    "PartitionReplicas",
    "ProducerState",
    "ResourceType",
    "TopicDescription",
    "TopicListing",
    "TransactionDescription",
    "TransactionListing",
    "OpenTransaction",
]

T = TypeVar("T")
_ONE_MS = datetime.timedelta(milliseconds=1)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id in ListTransactions' answer, with the broker coordinating it."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of a transactional id. ``partitions``: those in the ongoing
    transaction (while it completes: those still without their marker)."""

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None
    """When the ongoing transaction started; None when there is none."""
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One producer id as a partition's leader keeps it (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    """The coordinator epoch of the last marker for this producer; None before any."""
    current_txn_start_offset: int | None
    """The first offset of the producer's open transaction in this partition; None if none."""


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A partition's open transaction (``find_hanging_transactions``)."""

    partition: TopicPartition
    producer: ProducerState


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; ``None`` means the broker's default (num.partitions,
    default.replication.factor). ``replica_assignment`` places the replicas by hand instead:
    partition -> broker ids, the first the preferred leader (kafka-topics.sh's
    ``--replica-assignment 1:2:3,2:3:1``); partitions and replication factor then follow
    from it and must be left None."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] | None = None
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What CreateTopics reports (with validate_only, what it would have created)."""

    name: str
    topic_id: uuid.UUID | None
    partitions: int  # -1 from brokers older than CreateTopics v5, which do not say
    replication_factor: int


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A broker as Metadata lists it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The brokers of the cluster and its controller (-1: none elected right now)."""

    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    partitions: int
    internal: bool = False


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition: who leads it, its replicas, and its log's offsets and size.

    ``log_end_offset`` is what ListOffsets reports as the latest offset, the high watermark
    (on a single-replica broker the same as the leader's log end offset). ``size_bytes`` is
    None when the broker does not serve DescribeLogDirs. A partition without a leader
    (``leader`` -1), or whose leader cannot be reached, has offsets -1 and no size.
    """

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    size_bytes: int | None
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionDescription, ...]

    @property
    def size_bytes(self) -> int | None:
        sizes = [p.size_bytes for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """Where a partition's replicas are and which are in sync (Metadata alone: no request to
    the leader, so it answers while brokers are down)."""

    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int  # -1 when the broker does not say (Metadata before v7)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        """Fewer replicas in sync than assigned (kafka-topics.sh --under-replicated-partitions)."""
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        """No leader: nothing can be written or read (kafka-topics.sh --unavailable-partitions)."""
        return self.leader < 0


class ElectionType(enum.IntEnum):
    """ElectLeaders' election type (kafka-leader-election.sh --election-type)."""

    PREFERRED = 0  # the first replica of the assignment, if it is in sync
    UNCLEAN = 1  # a live replica out of sync, only for a partition without a leader: may lose records


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment under way (ListPartitionReassignments): the full replica set (target
    and origin), and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """What DescribeConfigs / AlterConfigs act on: ``ConfigResource.topic("events")`` or
    ``ConfigResource.broker(0)`` (``ConfigResource.broker()``: whichever broker answers)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> "ConfigResource":
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | None = None) -> "ConfigResource":
        return cls(ResourceType.BROKER, "" if node_id is None else str(node_id))

    def __str__(self) -> str:
        if self.type is ResourceType.TOPIC:
            return f"topic {self.name!r}"
        return f"broker {self.name}" if self.name else "the broker"


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (DescribeConfigs ``config_source``, KIP-226)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1  # a topic's own override
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4  # server.properties / the command line
    DEFAULT_CONFIG = 5  # Kafka's default
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, value: int) -> "ConfigSource":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_override(self) -> bool:
        """Set on this topic (or dynamically on this broker), not inherited."""
        return self.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG)

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs change: ``AlterConfigOp.set("retention.ms", "1000")``,
    ``.delete(name)`` (back to the default), ``.append`` / ``.subtract`` for list configs."""

    name: str
    op: AlterConfigOpType
    value: str | None = None

    @classmethod
    def set(cls, name: str, value: str) -> "AlterConfigOp":
        return cls(name, AlterConfigOpType.SET, value)

    @classmethod
    def delete(cls, name: str) -> "AlterConfigOp":
        return cls(name, AlterConfigOpType.DELETE)

    @classmethod
    def append(cls, name: str, value: str) -> "AlterConfigOp":
        return cls(name, AlterConfigOpType.APPEND, value)

    @classmethod
    def subtract(cls, name: str, value: str) -> "AlterConfigOp":
        return cls(name, AlterConfigOpType.SUBTRACT, value)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """What ListOffsets looks up: ``OffsetSpec.EARLIEST`` (the log start offset),
    ``OffsetSpec.LATEST`` (the high watermark), ``OffsetSpec.MAX_TIMESTAMP`` (the record
    with the largest timestamp), or ``OffsetSpec.for_timestamp(ms)``: the first offset whose
    timestamp is at or after ``ms``."""

    timestamp: int

    EARLIEST: ClassVar["OffsetSpec"]
    LATEST: ClassVar["OffsetSpec"]
    MAX_TIMESTAMP: ClassVar["OffsetSpec"]

    @classmethod
    def for_timestamp(cls, ms: int) -> "OffsetSpec":
        if ms < 0:
            raise ValueError(f"a timestamp must be milliseconds since the epoch (>= 0), not {ms}")
        return cls(ms)


OffsetSpec.LATEST = OffsetSpec(-1)
OffsetSpec.EARLIEST = OffsetSpec(-2)
OffsetSpec.MAX_TIMESTAMP = OffsetSpec(-3)


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int  # -1 for EARLIEST / LATEST
    leader_epoch: int = -1


# ---------------------------------------------------------------------------- the client


class Admin:
    def __init__(
        self,
        bootstrap_servers: str | Iterable[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "pulllog-admin",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        retry_backoff_ms: int = 100,
    ) -> None:
        self._cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                connect_timeout_ms=connect_timeout_ms)
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        """The wait before a controller request is sent again (Kafka's ``retry.backoff.ms``)."""

    async def start(self) -> None:
        """Connect to a bootstrap server (BrokerUnreachableError names the address)."""
        await self._cluster.any_connection()

    async def close(self) -> None:
        await self._cluster.close()

    async def __aenter__(self) -> "Admin":
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replica_assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> CreatedTopic:
        new = NewTopic(name, partitions, replication_factor, configs, replica_assignment)
        return (await self.create_topics([new], validate_only=validate_only))[0]

    async def create_topics(self, topics: Iterable[NewTopic | str], *, validate_only: bool = False) -> list[CreatedTopic]:
        """Create topics (a plain name gets the broker's defaults); with ``validate_only``
        the broker checks everything and creates nothing."""
        wanted = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        data = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": -1 if t.partitions is None else t.partitions,
                    "replication_factor": -1 if t.replication_factor is None else t.replication_factor,
                    "assignments": [{"partition_index": p, "broker_ids": list(brokers)}
                                    for p, brokers in sorted((t.replica_assignment or {}).items())],
                    "configs": [{"name": k, "value": str(v)} for k, v in (t.configs or {}).items()],
                }
                for t in wanted
            ],
            "timeout": self.request_timeout_ms,
            "validate_only": validate_only,
        }
        resp = await self._controller_call("create_topics", 2, 7, data, lambda r: [t.error_code for t in r.topics])
        created, errors = [], []
        for t in resp.topics:
            if t.error_code != ErrorCode.none:
                errors.append(_topic_error(t.error_code, t.name, getattr(t, "error_message", None), "create"))
                continue
            topic_id = getattr(t, "topic_id", None)
            created.append(CreatedTopic(
                t.name, None if topic_id in (None, uuid.UUID(int=0)) else topic_id,
                int(getattr(t, "num_partitions", -1)), int(getattr(t, "replication_factor", -1))))
        if errors:
            raise errors[0]
        return created

    async def delete_topic(self, name: str) -> None:
        await self.delete_topics([name])

    async def delete_topics(self, names: Iterable[str]) -> None:
        names = list(names)
        data = {"topics": [{"name": n, "topic_id": None} for n in names], "topic_names": names,
                "timeout": self.request_timeout_ms}
        resp = await self._controller_call("delete_topics", 1, 6, data, lambda r: [t.error_code for t in r.responses])
        for name in names:
            self._cluster.invalidate(name)
        for t in resp.responses:
            if t.error_code != ErrorCode.none:
                raise _topic_error(t.error_code, t.name, getattr(t, "error_message", None), "delete")

    async def describe_cluster(self) -> ClusterDescription:
        """The live brokers (by id) and the controller, from a Metadata request for no topic."""
        await self._cluster.refresh(())
        return ClusterDescription(
            self._cluster.cluster_id, self._cluster.controller_id,
            tuple(BrokerNode(node_id, host, port) for node_id, (host, port) in sorted(self._cluster.brokers.items())))

    async def list_topics(self, *, include_internal: bool = False) -> list[TopicListing]:
        """Every topic, sorted by name."""
        await self._cluster.refresh(None)
        return [
            TopicListing(info.name, info.topic_id, len(info.partitions), info.internal)
            for info in sorted(self._cluster.topics.values(), key=lambda i: i.name)
            if include_internal or not info.internal
        ]

    async def describe_topic(self, name: str) -> TopicDescription:
        return (await self.describe_topics([name]))[0]

    async def describe_topics(self, names: Iterable[str]) -> list[TopicDescription]:
        """Partitions with their leaders, log start / end offsets (ListOffsets) and sizes
        (DescribeLogDirs), in the order asked."""
        names = list(dict.fromkeys(names))
        await self._refresh_topics(names)
        tps = [TopicPartition(n, p) for n in names for p in sorted(self._cluster.topics[n].partitions)]
        # A partition without a leader has no offsets to ask for; one whose leader is down
        # (not yet replaced) none to get: both are described with what Metadata says.
        led = [tp for tp in tps if self._cluster.topics[tp.topic].partitions[tp.partition].leader >= 0]
        starts, ends, sizes = await _all(
            self._list_offsets({tp: OffsetSpec.EARLIEST for tp in led}, refresh=False, reachable_only=True),
            self._list_offsets({tp: OffsetSpec.LATEST for tp in led}, refresh=False, reachable_only=True),
            self._partition_sizes(led),
        )
        out = []
        for name in names:
            info = self._cluster.topics[name]
            parts = []
            for index in sorted(info.partitions):
                p, tp = info.partitions[index], TopicPartition(name, index)
                start, end = starts.get(tp), ends.get(tp)
                parts.append(PartitionDescription(
                    index, p.leader, p.replicas, p.isr,
                    start.offset if start else -1, end.offset if end else -1, sizes.get(tp), p.offline_replicas))
            out.append(TopicDescription(name, info.topic_id, info.internal, tuple(parts)))
        return out

    async def create_partitions(self, topic: str, total: int, *, validate_only: bool = False) -> None:
        """Grow ``topic`` to ``total`` partitions (Kafka never shrinks a topic)."""
        data = {"topics": [{"name": topic, "count": total, "assignments": None}],
                "timeout": self.request_timeout_ms, "validate_only": validate_only}
        resp = await self._controller_call("create_partitions", 0, 3, data, lambda r: [t.error_code for t in r.results])
        self._cluster.invalidate(topic)
        for r in resp.results:
            if r.error_code != ErrorCode.none:
                raise _topic_error(r.error_code, r.name, r.error_message, "add partitions to")

    async def describe_replicas(self, topics: Iterable[str] | None = None) -> list[PartitionReplicas]:
        """Every partition of ``topics`` (None: of every topic, internal ones included) with
        its leader, replicas, in-sync and offline replicas, sorted; one Metadata request."""
        names = None if topics is None else list(dict.fromkeys(topics))
        if names is None:
            await self._cluster.refresh(None)
        else:
            await self._refresh_topics(names)
        return [
            PartitionReplicas(info.name, p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas)
            for info in sorted(self._cluster.topics.values(), key=lambda i: i.name)
            if names is None or info.name in names
            for p in (info.partitions[i] for i in sorted(info.partitions))
        ]

    async def elect_leaders(self, election_type: ElectionType, partitions: Iterable[TopicPartition] | None = None
                            ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders (KIP-460): elect the preferred replica, or (UNCLEAN) any live replica
        of a partition without a leader. ``partitions`` None: every partition, as Kafka's
        ``--all-topic-partitions`` (the controller answers for those it considered).

        Returns each partition's outcome: None when a new leader was elected, else a
        KafkaError; ELECTION_NOT_NEEDED (code 84) means the right leader was leading already.
        A request-level error (the cluster refused them all) is raised."""
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        lo = 0 if election_type is ElectionType.PREFERRED else 1  # v0 knows only preferred elections
        data = {"election_type": int(election_type), "timeout": self.request_timeout_ms,
                "topic_partitions": None if wanted is None else [
                    {"topic": t, "partitions": [tp.partition for tp in wanted if tp.topic == t]}
                    for t in dict.fromkeys(tp.topic for tp in wanted)]}
        resp = await self._controller_call("elect_leaders", lo, 2, data, lambda r: [
            getattr(r, "error_code", ErrorCode.none),  # v1+; v0 answers per partition
            *(p.error_code for t in r.replica_election_results for p in t.partition_result)])
        top = getattr(resp, "error_code", ErrorCode.none)
        if top != ErrorCode.none:
            raise error_for(top, f"{top.name.upper()}: the cluster refused the {election_type.name.lower()} "
                                 "leader election")
        return self._partition_outcomes(((t.topic, p.partition_id, p.error_code, p.error_message)
                                         for t in resp.replica_election_results for p in t.partition_result),
                                        "no new leader")

    async def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
                                            ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments (KIP-455): move each partition to the brokers given (the
        first becomes its preferred leader), or with None cancel the reassignment under way.
        The controller starts them and answers; the data moves afterwards (see
        ``list_partition_reassignments``). Each partition's outcome: None when accepted, else a
        KafkaError (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, ...). A
        request-level error is raised."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in reassignments.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "replicas": None if replicas is None else list(replicas)})
        data = {"timeout": self.request_timeout_ms,
                "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}
        resp = await self._controller_call("alter_partition_reassignments", 0, 0, data, lambda r: [r.error_code])
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"{resp.error_code.name.upper()}: the cluster refused the reassignment"
                                             + (f": {resp.error_message}" if resp.error_message else ""))
        return self._partition_outcomes(((t.name, p.partition_index, p.error_code, p.error_message)
                                         for t in resp.responses for p in t.partitions), "not reassigned")

    def _partition_outcomes(self, answers: Iterable[tuple[str, int, ErrorCode, str | None]], refused: str
                            ) -> dict[TopicPartition, KafkaError | None]:
        """Per-partition outcomes of a leadership-moving request (None: done), from its answers'
        (topic, partition, error code, message); the topics' cached metadata is dropped, as
        their leaders or replicas move."""
        out: dict[TopicPartition, KafkaError | None] = {}
        for topic, partition, code, message in answers:
            tp = TopicPartition(topic, int(partition))
            out[tp] = None if code == ErrorCode.none else error_for(
                code, f"{code.name.upper()}: {message or refused} ({tp.topic}-{tp.partition})")
        for name in {tp.topic for tp in out}:
            self._cluster.invalidate(name)
        return out

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                           ) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments: the reassignments under way (of ``partitions``, or all)."""
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        data = {"timeout": self.request_timeout_ms, "topics": None if wanted is None else [
            {"name": t, "partition_indexes": [tp.partition for tp in wanted if tp.topic == t]}
            for t in dict.fromkeys(tp.topic for tp in wanted)]}
        resp = await self._controller_call("list_partition_reassignments", 0, 0, data, lambda r: [r.error_code])
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"{resp.error_code.name.upper()}: the cluster did not list its "
                                             "reassignments" + (f": {resp.error_message}" if resp.error_message else ""))
        return {TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                    tuple(int(r) for r in p.replicas), tuple(int(r) for r in p.adding_replicas),
                    tuple(int(r) for r in p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    async def _refresh_topics(self, names: list[str]) -> None:
        await self._cluster.refresh(names)
        for name in names:
            if name not in self._cluster.topics:
                raise UnknownTopicError(name)

    # ------------------------------------------------------------------ configs

    async def describe_configs(self, resource: ConfigResource, keys: Iterable[str] | None = None) -> dict[str, ConfigEntry]:
        """Every config of a topic or broker (or only ``keys``), by name."""
        conn, name = await self._resource_connection(resource)
        data = {"resources": [{"resource_type": int(resource.type), "resource_name": name,
                               "configuration_keys": None if keys is None else list(keys)}],
                "include_synonyms": False, "include_documentation": False}
        _version, resp = await self._call(conn, "describe_configs", 1, 4, data)
        (result,) = resp.results
        if result.error_code != ErrorCode.none:
            raise _resource_error(result.error_code, resource, result.error_message, "describe configs of")
        return {
            c.name: ConfigEntry(c.name, c.value, ConfigSource.of(int(c.config_source)), bool(c.read_only),
                                bool(c.is_sensitive))
            for c in result.configs
        }

    async def alter_configs(self, resource: ConfigResource, configs: Mapping[str, str], *,
                            validate_only: bool = False) -> None:
        """Replace the resource's overrides with ``configs`` (AlterConfigs: any override not
        named goes back to its default; ``incremental_alter_configs`` changes only some)."""
        conn, name = await self._resource_connection(resource)
        data = {"resources": [{"resource_type": int(resource.type), "resource_name": name,
                               "configs": [{"name": k, "value": str(v)} for k, v in configs.items()]}],
                "validate_only": validate_only}
        _version, resp = await self._call(conn, "alter_configs", 0, 2, data)
        for r in resp.responses:
            if r.error_code != ErrorCode.none:
                raise _resource_error(r.error_code, resource, r.error_message, "alter configs of")

    async def incremental_alter_configs(self, resource: ConfigResource, ops: Iterable[AlterConfigOp], *,
                                        validate_only: bool = False) -> None:
        conn, name = await self._resource_connection(resource)
        data = {"resources": [{"resource_type": int(resource.type), "resource_name": name,
                               "configs": [{"name": o.name, "config_operation": int(o.op), "value": o.value}
                                           for o in ops]}],
                "validate_only": validate_only}
        _version, resp = await self._call(conn, "incremental_alter_configs", 0, 1, data)
        for r in resp.responses:
            if r.error_code != ErrorCode.none:
                raise _resource_error(r.error_code, resource, r.error_message, "alter configs of")

    async def _resource_connection(self, resource: ConfigResource) -> tuple[KafkaConnection, str]:
        if resource.type is not ResourceType.BROKER:
            return await self._cluster.any_connection(), resource.name
        if resource.name:
            try:
                node_id = int(resource.name)
            except ValueError:
                raise ValueError(f"a broker is named by its node id (an integer), not {resource.name!r}") from None
        else:
            await self._cluster.refresh([])
            node_id = min(self._cluster.brokers)
        return await self._cluster.connection(node_id), str(node_id)

    # ------------------------------------------------------------------ offsets

    async def list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec | int], *,
                           read_committed: bool = False) -> dict[TopicPartition, ListedOffset | None]:
        """The offset each spec names (an int is a timestamp in ms). None where there is
        none: no record at or after the timestamp, or MAX_TIMESTAMP on an empty partition."""
        wanted = {tp: s if isinstance(s, OffsetSpec) else OffsetSpec.for_timestamp(s) for tp, s in specs.items()}
        return await self._list_offsets(wanted, read_committed=read_committed)

    async def _list_offsets(self, wanted: Mapping[TopicPartition, OffsetSpec], *, read_committed: bool = False,
                            refresh: bool = True, reachable_only: bool = False
                            ) -> dict[TopicPartition, ListedOffset | None]:
        lo = 7 if any(s.timestamp == OffsetSpec.MAX_TIMESTAMP.timestamp for s in wanted.values()) else 1

        async def ask(conn: KafkaConnection, tps: list[TopicPartition]) -> dict[TopicPartition, ListedOffset | None]:
            data = {"replica_id": -1, "isolation_level": int(read_committed),
                    "topics": _by_topic(tps, lambda tp: {"partition_index": tp.partition,
                                                         "timestamp": wanted[tp].timestamp})}
            _version, resp = await self._call(conn, "list_offsets", lo, 7, data)
            out: dict[TopicPartition, ListedOffset | None] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if p.error_code != ErrorCode.none:
                        raise _partition_error(p.error_code, tp, "list offsets of")
                    offset = int(p.offset)
                    out[tp] = None if offset < 0 else ListedOffset(
                        offset, int(p.timestamp), int(getattr(p, "leader_epoch", -1)))
            return out

        return await self._per_leader(list(wanted), ask, refresh=refresh, reachable_only=reachable_only)

    async def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete each partition's records below an offset (-1: below the high watermark,
        i.e. all of them) by moving its log start offset; returns the new log start offsets."""

        async def ask(conn: KafkaConnection, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            data = {"topics": _by_topic(tps, lambda tp: {"partition_index": tp.partition, "offset": before[tp]}),
                    "timeout": self.request_timeout_ms}
            _version, resp = await self._call(conn, "delete_records", 0, 2, data)
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if p.error_code == ErrorCode.offset_out_of_range:
                        raise error_for(p.error_code, (
                            f"cannot delete records of {tp.topic}-{tp.partition} before offset {before[tp]}: "
                            "it is past the high watermark (see the latest offset with list_offsets)"))
                    if p.error_code != ErrorCode.none:
                        raise _partition_error(p.error_code, tp, "delete records of")
                    out[tp] = int(p.low_watermark)
            return out

        return await self._per_leader(list(before), ask)

    async def _partition_sizes(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Bytes on disk per partition, from its leader's DescribeLogDirs; {} when no broker
        serves it."""

        async def ask(conn: KafkaConnection, mine: list[TopicPartition]) -> dict[TopicPartition, int]:
            data = {"topics": [{"topic": t["name"], "partitions": [p["i"] for p in t["partitions"]]}
                               for t in _by_topic(mine, lambda tp: {"i": tp.partition})]}
            try:
                _version, resp = await self._call(conn, "describe_log_dirs", 1, 5, data)
            except UnsupportedByBrokerError:
                return {}
            wanted = set(mine)
            out: dict[TopicPartition, int] = {}
            for result in resp.results:
                if result.error_code != ErrorCode.none:
                    continue
                for t in result.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, int(p.partition_index))
                        if tp in wanted and not p.is_future_key:
                            out[tp] = out.get(tp, 0) + int(p.partition_size)
            return out

        return await self._per_leader(tps, ask, refresh=False, reachable_only=True) if tps else {}

    # ------------------------------------------------------------------ consumer groups

    async def _coordinator(self, key: str, key_type: int = 0) -> KafkaConnection:
        """The broker coordinating group ``key`` (key type 0) or transactional id ``key``
        (key type 1): FindCoordinator."""
        return await self._cluster.connection(await self._coordinator_id(key, key_type))

    async def _coordinator_id(self, key: str, key_type: int = 0) -> int:
        conn = await self._cluster.any_connection()
        # key type 1 (transaction) needs v1+; the transactional id must not be empty.
        version, resp = await self._call(conn, "find_coordinator", 0 if key_type == 0 else 1, 4, {
            "key": key, "key_type": key_type, "coordinator_keys": [key]})
        entry = resp.coordinators[0] if version >= 4 else resp
        if entry.error_code != ErrorCode.none:
            what = "group" if key_type == 0 else "transactional id"
            raise error_for(entry.error_code, f"no coordinator for {what} {key!r}: {entry.error_code.name}")
        node = int(entry.node_id)
        if node not in self._cluster.brokers:
            self._cluster.brokers[node] = (entry.host, int(entry.port))
        return node

    async def find_coordinator(self, key: str, *, transactional: bool = False) -> int:
        """The node id of the broker coordinating consumer group ``key`` (or, with
        ``transactional``, transactional id ``key``): FindCoordinator, as
        ``kafka-consumer-groups.sh --describe --state`` shows it."""
        return await self._coordinator_id(key, 1 if transactional else 0)

    async def list_groups(self) -> list[GroupListing]:
        conn = await self._cluster.any_connection()
        _v, resp = await self._call(conn, "list_groups", 0, 5, {"states_filter": [], "types_filter": []})
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"listing groups failed: {resp.error_code.name}")
        return sorted((GroupListing(g.group_id, getattr(g, "group_state", "") or "", g.protocol_type)
                       for g in resp.groups), key=lambda g: g.group_id)

    async def describe_group(self, group_id: str) -> GroupDescription:
        from ..net.consumer_protocol import decode_assignment

        conn = await self._coordinator(group_id)
        _v, resp = await self._call(conn, "describe_groups", 0, 5, {
            "groups": [group_id], "include_authorized_operations": False})
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise error_for(g.error_code, f"describing group {group_id!r} failed: {g.error_code.name}")
        members = []
        for m in g.members:
            try:
                assigned = tuple(TopicPartition(t, p) for t, p in decode_assignment(bytes(m.member_assignment)).partitions)
            except ValueError:
                assigned = ()
            members.append(MemberDescription(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                                             m.client_host.lstrip("/"), assigned))
        return GroupDescription(group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members))

    async def list_group_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
        """Committed (offset, metadata) of every partition the group has committed."""
        conn = await self._coordinator(group_id)
        version, resp = await self._call(conn, "offset_fetch", 1, 9, {
            "group_id": group_id, "topics": None, "require_stable": False,
            "groups": [{"group_id": group_id, "topics": None}]})
        topics = resp.groups[0].topics if version >= 8 else resp.topics
        out = {}
        for t in topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise error_for(p.error_code, f"offsets of group {group_id!r}: {p.error_code.name}")
                if p.committed_offset >= 0:
                    out[TopicPartition(t.name, p.partition_index)] = (int(p.committed_offset), p.metadata or "")
        return out

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets for a group with no active members (the paper's rewind)."""
        conn = await self._coordinator(group_id)
        data = {"group_id": group_id, "generation_id_or_member_epoch": -1, "generation_id": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": tp.partition, "committed_offset": off, "committed_leader_epoch": -1,
                     "committed_metadata": ""} for tp, off in offsets.items() if tp.topic == topic]}
                    for topic in sorted({tp.topic for tp in offsets})]}
        _v, resp = await self._call(conn, "offset_commit", 2, 9, data)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.unknown_member_id:
                    raise error_for(p.error_code, f"group {group_id!r} has active members; stop them first, "
                                    "then reset its offsets")
                if p.error_code != ErrorCode.none:
                    raise error_for(p.error_code, f"committing offsets for {group_id!r} failed: {p.error_code.name}")

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        for group_id in group_ids:
            conn = await self._coordinator(group_id)
            _v, resp = await self._call(conn, "delete_groups", 0, 2, {"groups_names": [group_id]})
            code = resp.results[0].error_code
            if code == ErrorCode.non_empty_group:
                raise error_for(code, f"group {group_id!r} still has members; stop them first")
            if code == ErrorCode.group_id_not_found:
                raise error_for(code, f"group {group_id!r} does not exist")
            if code != ErrorCode.none:
                raise error_for(code, f"deleting group {group_id!r} failed: {code.name}")

    # ------------------------------------------------------------------ transactions

    async def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                min_duration_ms: int | None = None) -> list[TransactionListing]:
        """Every transactional id known to every broker (ListTransactions), optionally only
        those in ``states`` (Kafka's names: Ongoing, PrepareCommit, ...), of ``producer_ids``, or
        (v1+, Kafka 3.8+) whose last transaction started more than ``min_duration_ms`` ago
        (Kafka filters by that start time whatever the state)."""
        await self._cluster.refresh([])
        data = {"state_filters": list(states), "producer_id_filters": [int(p) for p in producer_ids],
                "duration_filter": -1 if min_duration_ms is None else int(min_duration_ms)}
        lo = 0 if min_duration_ms is None else 1

        async def ask(node: int) -> list[TransactionListing]:
            _v, resp = await self._call(await self._cluster.connection(node), "list_transactions", lo, 1, data)
            if resp.error_code != ErrorCode.none:
                raise error_for(resp.error_code, f"listing transactions on broker {node} failed: "
                                f"{resp.error_code.name}")
            return [TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state, node)
                    for t in resp.transaction_states]

        listings = [t for part in await _all(*(ask(node) for node in sorted(self._cluster.brokers))) for t in part]
        return sorted(listings, key=lambda t: t.transactional_id)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """One transactional id's state at its coordinator (TransactionalIdNotFound: unknown)."""
        return (await self.describe_transactions([transactional_id]))[transactional_id]

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each transactional id's state, asked of its coordinator (DescribeTransactions);
        raises for the first that failed (TRANSACTIONAL_ID_NOT_FOUND for an unknown id)."""
        by_node: dict[int, list[str]] = defaultdict(list)
        for transactional_id in dict.fromkeys(transactional_ids):
            by_node[await self._coordinator_id(transactional_id, 1)].append(transactional_id)

        async def ask(node: int, ids: list[str]) -> list[TransactionDescription]:
            _v, resp = await self._call(await self._cluster.connection(node), "describe_transactions", 0, 0,
                                        {"transactional_ids": ids})
            out = []
            for t in resp.transaction_states:
                if t.error_code == ErrorCode.transactional_id_not_found:
                    raise error_for(t.error_code, f"transactional id {t.transactional_id!r} is unknown to its "
                                    "coordinator (never used, or expired)")
                if t.error_code != ErrorCode.none:
                    raise error_for(t.error_code, f"describing transactional id {t.transactional_id!r} failed: "
                                    f"{t.error_code.name}")
                start = t.transaction_start_time
                out.append(TransactionDescription(
                    t.transactional_id, node, t.transaction_state, int(t.producer_id), int(t.producer_epoch),
                    int(t.transaction_timeout / _ONE_MS),
                    None if start is None else round(start.timestamp() * 1000),
                    tuple(TopicPartition(d.topic, int(p)) for d in t.topics for p in d.partitions)))
            return out

        found = [d for part in await _all(*(ask(n, ids) for n, ids in by_node.items())) for d in part]
        return {d.transactional_id: d for d in found}

    async def describe_producers(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition, as its leader keeps them (DescribeProducers)."""

        async def ask(conn: KafkaConnection, tps: list[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
            topics = [{"name": t["name"], "partition_indexes": [p["i"] for p in t["partitions"]]}
                      for t in _by_topic(tps, lambda tp: {"i": tp.partition})]
            _v, resp = await self._call(conn, "describe_producers", 0, 0, {"topics": topics})
            out: dict[TopicPartition, list[ProducerState]] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if p.error_code != ErrorCode.none:
                        raise _partition_error(p.error_code, tp, "describe the producers of")
                    out[tp] = [ProducerState(
                        int(s.producer_id), int(s.producer_epoch), int(s.last_sequence), int(s.last_timestamp),
                        None if s.coordinator_epoch < 0 else int(s.coordinator_epoch),
                        None if s.current_txn_start_offset < 0 else int(s.current_txn_start_offset))
                        for s in p.active_producers]
            return out

        return await self._per_leader(list(dict.fromkeys(partitions)), ask)

    async def abort_transaction(self, partition: TopicPartition, *, start_offset: int | None = None,
                                producer_id: int | None = None, producer_epoch: int | None = None,
                                coordinator_epoch: int | None = None) -> ProducerState | None:
        """Abort a hanging transaction in one partition (``kafka-transactions.sh abort``).

        Name the transaction by its ``start_offset`` or its ``producer_id``: DescribeProducers
        then gives the producer's epoch and the partition's coordinator epoch (returned).
        With ``producer_id``, ``producer_epoch`` and ``coordinator_epoch`` all given, no
        lookup is made (brokers without DescribeProducers). Then WriteTxnMarkers, an abort
        marker for this partition alone, to its leader."""
        found: ProducerState | None = None
        if start_offset is None and producer_id is None:
            raise ValueError("name the transaction to abort: its start offset or its producer id")
        if start_offset is not None or producer_epoch is None or coordinator_epoch is None:
            found = await self._open_transaction(partition, start_offset, producer_id)
            producer_id, producer_epoch = found.producer_id, found.producer_epoch
            coordinator_epoch = found.coordinator_epoch
        assert producer_id is not None and producer_epoch is not None
        # A producer whose transaction hung before any marker has no coordinator epoch (-1);
        # 0 is at most any epoch the partition can have seen (Kafka's tool does the same).
        epoch = max(coordinator_epoch or 0, 0)
        await self._write_abort_marker(partition, producer_id, producer_epoch, epoch)
        return found

    async def _open_transaction(self, tp: TopicPartition, start_offset: int | None,
                                producer_id: int | None) -> ProducerState:
        producers = (await self.describe_producers([tp]))[tp]
        for state in producers:
            if state.current_txn_start_offset is None:
                continue
            if (start_offset is None or state.current_txn_start_offset == start_offset) and \
                    (producer_id is None or state.producer_id == producer_id):
                return state
        which = (f"starting at offset {start_offset}" if start_offset is not None
                 else f"of producer id {producer_id}")
        raise KafkaError(ErrorCode.invalid_txn_state,
                         f"no open transaction {which} in {tp.topic}-{tp.partition}; "
                         f"`pulllog transactions describe-producers {tp.topic} --partition {tp.partition}` lists them")

    async def _write_abort_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                                  coordinator_epoch: int) -> None:
        data = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                             "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                             "coordinator_epoch": coordinator_epoch}]}

        async def ask(conn: KafkaConnection, _tps: list[TopicPartition]) -> dict[TopicPartition, None]:
            _v, resp = await self._call(conn, "write_txn_markers", 1, 2, data)
            codes = [p.error_code for m in resp.markers for t in m.topics for p in t.partitions]
            if len(codes) != 1:
                raise KafkaError(ErrorCode.unknown_server_error,
                                 f"WriteTxnMarkers answered {len(codes)} partitions for one")
            code = codes[0]
            if code == ErrorCode.transaction_coordinator_fenced:
                raise error_for(code, f"cannot abort producer {producer_id}'s transaction in {tp.topic}-"
                                f"{tp.partition}: coordinator epoch {coordinator_epoch} is older than the "
                                "partition's; its coordinator is alive, let it finish the transaction")
            if code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
                raise error_for(code, f"cannot abort producer {producer_id}'s transaction in {tp.topic}-"
                                f"{tp.partition}: epoch {producer_epoch} is not the producer's current one")
            if code != ErrorCode.none:
                raise _partition_error(code, tp, f"abort producer {producer_id}'s transaction in")
            return {tp: None}

        await self._per_leader([tp], ask)

    async def find_hanging_transactions(self, partitions: Iterable[TopicPartition] | None = None, *,
                                        max_transaction_timeout_ms: int = 15 * 60_000,
                                        now_ms: int | None = None) -> list[OpenTransaction]:
        """Open transactions that their coordinator will never end (``kafka-transactions.sh
        find-hanging``): open for longer than ``max_transaction_timeout_ms`` (by the producer's
        last write) and either unknown to every coordinator, or described without this
        partition. ``partitions``: every partition of every topic when None."""
        if partitions is None:
            topics = [t.name for t in await self.list_topics(include_internal=True)]
            tps = [TopicPartition(d.name, p.partition) for d in await self.describe_topics(topics)
                   for p in d.partitions]
        else:
            tps = list(partitions)
        if not tps:
            return []
        now = _wall_clock_ms() if now_ms is None else now_ms
        candidates = [OpenTransaction(tp, state) for tp, states in (await self.describe_producers(tps)).items()
                      for state in states if state.current_txn_start_offset is not None
                      and now - state.last_timestamp > max_transaction_timeout_ms]
        if not candidates:
            return []
        listed = await self.list_transactions(producer_ids={c.producer.producer_id for c in candidates})
        ids = {t.producer_id: t.transactional_id for t in listed}
        descriptions: dict[str, TransactionDescription | None] = {}
        for transactional_id in set(ids.values()):
            try:
                descriptions[transactional_id] = await self.describe_transaction(transactional_id)
            except KafkaError as exc:
                if exc.code != ErrorCode.transactional_id_not_found:
                    raise
                descriptions[transactional_id] = None
        hanging = []
        for c in candidates:
            transactional_id = ids.get(c.producer.producer_id)
            description = descriptions.get(transactional_id) if transactional_id is not None else None
            if description is None or c.partition not in description.partitions:
                hanging.append(c)
        return sorted(hanging, key=lambda c: (c.partition.topic, c.partition.partition, c.producer.producer_id))

    # ------------------------------------------------------------------ plumbing

    async def _call(self, conn: KafkaConnection, api: str, lo: int, hi: int, data: Mapping[str, Any]) -> tuple[int, Any]:
        version = conn.version(api, lo, hi)
        timeout = self.request_timeout_ms / 1000
        try:
            return version, await asyncio.wait_for(conn.request(api, version, data), timeout)
        except asyncio.TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"the broker at {conn.address} did not answer {api} within {timeout:g} s") from None

    async def _controller_call(self, api: str, lo: int, hi: int, data: Mapping[str, Any],
                               codes: Callable[[Any], list[ErrorCode]]) -> Any:
        """Send to the controller. After NOT_CONTROLLER or a lost connection (the controller's
        broker died, or moved the role), find the controller again from Metadata and send
        again, ``retry_backoff_ms`` apart, until ``request_timeout_ms`` has passed (as Kafka's
        admin client retries a call until its timeout): then the last answer (NOT_CONTROLLER,
        raised by the caller as any error) or the connection's error. A request retried after
        a lost connection may have taken effect: a CreateTopics may then answer
        TOPIC_ALREADY_EXISTS, as with Kafka's client."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        refresh = False
        while True:
            try:
                _version, resp = await self._call(await self._controller(refresh=refresh), api, lo, hi, data)
            except ConnectionError:  # BrokerUnreachableError, ConnectionClosedError, a reset
                if loop.time() + self.retry_backoff_ms / 1000 >= deadline:
                    raise
            else:
                if ErrorCode.not_controller not in codes(resp) or (
                        loop.time() + self.retry_backoff_ms / 1000 >= deadline):
                    return resp
            refresh = True
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _controller(self, *, refresh: bool) -> KafkaConnection:
        if refresh or self._cluster.controller_id < 0:
            await self._cluster.refresh([])
        if self._cluster.controller_id in self._cluster.brokers:
            return await self._cluster.connection(self._cluster.controller_id)
        return await self._cluster.any_connection()

    async def _per_leader(
        self,
        tps: list[TopicPartition],
        ask: Callable[[KafkaConnection, list[TopicPartition]], Awaitable[dict[TopicPartition, T]]],
        *,
        refresh: bool = True,
        reachable_only: bool = False,
    ) -> dict[TopicPartition, T]:
        """Group partitions by leader, ``ask(conn, partitions)`` each leader concurrently,
        merge the answers. ``refresh=False``: the caller has just fetched their metadata.
        ``reachable_only``: a leader that cannot be reached (down, not replaced yet) is left
        out of the answer instead of failing it."""
        if refresh:
            await self._refresh_topics(list(dict.fromkeys(tp.topic for tp in tps)))
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            info = self._cluster.topics[tp.topic]
            p = info.partitions.get(tp.partition)
            if p is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                 f"topic {tp.topic!r} has no partition {tp.partition} "
                                 f"(it has {_plural(len(info.partitions), 'partition')})")
            by_leader[p.leader].append(tp)

        async def one(leader: int, mine: list[TopicPartition]) -> dict[TopicPartition, T]:
            if not reachable_only:
                return await ask(await self._cluster.connection(leader), mine)
            try:
                return await ask(await self._cluster.connection(leader), mine)
            except ConnectionError:
                return {}

        merged: dict[TopicPartition, T] = {}
        for part in await _all(*(one(leader, mine) for leader, mine in by_leader.items())):
            merged.update(part)
        return merged


# ---------------------------------------------------------------------------- helpers


async def _all(*aws: Awaitable[Any]) -> list[Any]:
    """Run concurrently in a task group; a failure cancels the rest and is raised as itself
    (not wrapped in an ExceptionGroup), so callers catch KafkaError as usual."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(_awaited(a)) for a in aws]
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


def _by_topic(tps: Iterable[TopicPartition], entry: Any) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp in tps:
        grouped[tp.topic].append(entry(tp))
    return [{"name": name, "partitions": parts} for name, parts in grouped.items()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _topic_error(code: ErrorCode, topic: str, message: str | None, doing: str) -> KafkaError:
    """One line naming the topic, the broker's reason and, where there is one, what to do."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
        return UnknownTopicError(topic)
    if code == ErrorCode.topic_already_exists:
        return error_for(code, f"topic {topic!r} already exists")
    reason = message or code.name.replace("_", " ")
    return error_for(code, f"cannot {doing} topic {topic!r}: {reason}")


def _resource_error(code: ErrorCode, resource: ConfigResource, message: str | None, doing: str) -> KafkaError:
    if resource.type is ResourceType.TOPIC and code == ErrorCode.unknown_topic_or_partition:
        return UnknownTopicError(resource.name)
    reason = message or code.name.replace("_", " ")
    return error_for(code, f"cannot {doing} {resource}: {reason}")


def _partition_error(code: ErrorCode, tp: TopicPartition, doing: str) -> KafkaError:
    if code == ErrorCode.unknown_topic_or_partition:
        return KafkaError(code, f"cannot {doing} {tp.topic}-{tp.partition}: no such topic or partition")
    return error_for(code, f"cannot {doing} {tp.topic}-{tp.partition}: {code.name.replace('_', ' ')}")
