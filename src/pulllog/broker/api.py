"""What a request handler may ask of the broker: the interface between the two.

Handlers (``pulllog.broker.handlers``) and the connection shell (``pulllog.broker.server``)
are written against :class:`BrokerApi`, never against ``pulllog.broker.broker``: the broker
imports the handler registry and the server, and neither imports it back (an import-linter
contract keeps it so). :class:`~pulllog.broker.broker.Broker` satisfies the protocol
structurally; a test may hand a handler anything else that does.

Rules the interface keeps:

* A partition's log comes from one call, :meth:`BrokerApi.partition`, which answers with the
  :class:`~pulllog.log.Log` or a :class:`~pulllog.broker.topics.PartitionError` holding Kafka's
  error code (UNKNOWN_TOPIC_OR_PARTITION). Nothing here exposes the topic table itself.
* Topics are read and changed through :class:`TopicCatalog` (find, create, alter, ...);
  groups through :class:`GroupCoordinatorApi` (the coordinator's methods, which take and
  return dataclasses; never its ``groups`` table).
* Everything here runs on the broker's event loop thread; nothing is locked.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

    from ..group.coordinator import (
        DeleteGroupsRequest,
        DeleteGroupsResult,
        DescribeGroupsRequest,
        DescribeGroupsResult,
        HeartbeatRequest,
        HeartbeatResult,
        JoinRequest,
        JoinResult,
        LeaveGroupRequest,
        LeaveGroupResult,
        ListGroupsRequest,
        ListGroupsResult,
        OffsetCommitRequest,
        OffsetCommitResult,
        OffsetDeleteRequest,
        OffsetDeleteResult,
        OffsetFetchRequest,
        OffsetFetchResult,
        SyncRequest,
        SyncResult,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResult,
    )
    from ..log import Log, LogConfig
    from ..txn.coordinator import (
        AddPartitionsRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        InitProducerIdResult,
        ListTransactionsRequest,
        ListTransactionsResult,
        TransactionDescription,
    )
    from ..cluster.membership import ClusterMembership
    from ..cluster.state import LeaderAndIsr, PartitionView
    from ..cluster.znodes import ClusterView
    from ..purgatory import DelayedOperation
    from .config import BrokerConfig
    from .flusher import FlushResult
    from .replica_manager import ReplicaManager
    from .topics import OfflineTopic, PartitionError, Topic

__all__ = ["BrokerApi", "GroupCoordinatorApi", "TopicCatalog", "TransactionCoordinatorApi"]


class TopicCatalog(Protocol):
    """The topics of this broker, as handlers see them (``pulllog.broker.topics.TopicManager``)."""

    cluster_id: str

    def find(self, name: str) -> "Topic | None": ...

    def get(self, name: str) -> "Topic":
        """The topic, or UnknownTopicError."""
        ...

    def by_id(self, topic_id: uuid.UUID) -> "Topic | None": ...

    def names(self) -> list[str]: ...

    offline: "dict[str, OfflineTopic]"
    """Topics on disk that could not be opened at start (a degraded start): never re-created."""

    def delete_offline(self, name: str) -> "OfflineTopic":
        """Delete an offline topic (its partition directories now, or at the next start)."""
        ...

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> "LogConfig": ...

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> "Topic": ...

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None: ...

    def alter_config(self, name: str, overrides: Mapping[str, str], *,
                     validate_only: bool = False) -> "LogConfig": ...

    defaults: "LogConfig"
    """The log defaults in force: server.properties under the dynamic broker configs."""
    dynamic: dict[str, dict[str, str]]
    """Dynamic broker configs by entity: this broker's id, or "" for the cluster default."""

    def alter_broker_config(self, entity: str, values: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace ``entity``'s dynamic broker configs (ConfigError when one is not dynamic or invalid)."""
        ...


class GroupCoordinatorApi(Protocol):
    """The group coordinator, as handlers see it (``pulllog.group.coordinator.GroupCoordinator``)."""

    async def join(self, request: "JoinRequest") -> "JoinResult": ...

    async def sync(self, request: "SyncRequest") -> "SyncResult": ...

    def heartbeat(self, request: "HeartbeatRequest") -> "HeartbeatResult": ...

    def leave(self, request: "LeaveGroupRequest") -> "LeaveGroupResult": ...

    def commit_offsets(self, request: "OffsetCommitRequest") -> "OffsetCommitResult": ...

    def fetch_offsets(self, request: "OffsetFetchRequest") -> "OffsetFetchResult": ...

    def delete_offsets(self, request: "OffsetDeleteRequest") -> "OffsetDeleteResult": ...

    def describe(self, request: "DescribeGroupsRequest") -> "DescribeGroupsResult": ...

    def list_groups(self, request: "ListGroupsRequest") -> "ListGroupsResult": ...

    def delete_groups(self, request: "DeleteGroupsRequest") -> "DeleteGroupsResult": ...

    def txn_offset_commit(self, request: "TxnOffsetCommitRequest") -> "TxnOffsetCommitResult": ...

    def handle_txn_completion(self, producer_id: int, offsets_partitions: Iterable[int], commit: bool) -> None:
        """Not a Kafka API: the transaction coordinator wrote ``producer_id``'s marker into these
        ``__consumer_offsets`` partitions (commit makes its pending offsets committed, abort drops them)."""
        ...


class TransactionCoordinatorApi(Protocol):
    """The transaction coordinator, as handlers see it (``pulllog.txn.coordinator.TransactionCoordinator``)."""

    def init_producer_id(self, request: "InitProducerIdRequest") -> "InitProducerIdResult": ...

    def add_partitions(self, request: "AddPartitionsRequest") -> "dict[tuple[str, int], ErrorCode]": ...

    def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
               partitions: Iterable[tuple[str, int]]) -> "dict[tuple[str, int], ErrorCode]":
        """Are these partitions in the producer's transaction? (a transactional Produce's check)"""
        ...

    def end_txn(self, request: "EndTxnRequest") -> "ErrorCode": ...

    def ownership_error(self, transactional_id: str) -> "ErrorCode": ...

    def describe(self, transactional_id: str) -> "TransactionDescription": ...

    def list_transactions(self, request: "ListTransactionsRequest") -> "ListTransactionsResult": ...


class BrokerApi(Protocol):
    """What handlers may ask of the broker."""

    @property
    def config(self) -> "BrokerConfig": ...

    @property
    def port(self) -> int:
        """The port actually bound (``port=0`` asks for any free one)."""
        ...

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) clients are told to connect to."""
        ...

    @property
    def cluster_view(self) -> "ClusterView | None":
        """A cluster member's latest view (live brokers, controller); None for a single broker."""
        ...

    @property
    def membership(self) -> "ClusterMembership | None":
        """A cluster member's ZooKeeper session (its admin writes); None for a single broker."""
        ...

    @property
    def partition_views(self) -> "Mapping[tuple[str, int], PartitionView]":
        """A cluster member's view of every partition of the cluster (empty for a single broker)."""
        ...

    async def wait_for_views(self, ready: "Callable[[], bool]", timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until ``ready()`` holds over the partition views."""
        ...

    async def alter_isr(self, state: "LeaderAndIsr", topic: str, partition: int) -> "LeaderAndIsr | None":
        """A leader's conditional ISR change (a cluster member); None on a conflict."""
        ...

    @property
    def replicas(self) -> "ReplicaManager | None":
        """A cluster member's replicated partitions (leader or follower); None for a single
        broker, whose every partition it leads with the high watermark at the log end."""
        ...

    @property
    def supported_apis(self) -> Mapping[int, tuple[int, int]]:
        """api key -> (min_version, max_version): what the handler registry serves."""
        ...

    @property
    def topics(self) -> TopicCatalog: ...

    @property
    def groups(self) -> GroupCoordinatorApi: ...

    @property
    def transactions(self) -> TransactionCoordinatorApi:
        """The transaction coordinator (loaded on first use: most brokers never see a transaction)."""
        ...

    def partition(self, topic: str, index: int) -> "Log | PartitionError":
        """The log of one partition, or why there is none (Kafka's error code)."""
        ...

    def wait_for_replication(self, topic: str, index: int, log: "Log") -> None:
        """A cluster member's append to a replicated log it leads, made inside
        :meth:`collect_flushes`: the request answers once the ISR has it (collected as a flush
        that fails with the replication's error)."""
        ...

    def cluster_partition_count(self, topic: str) -> int:
        """A cluster member's count of ``topic``'s partitions, from its assignment (0: unknown)."""
        ...

    def offsets_partition_count(self) -> int:
        """How many partitions ``__consumer_offsets`` has (the cluster's, for a cluster member),
        or will have: how group ids map to its partitions."""
        ...

    def auto_create_topic(self, name: str) -> "Topic":
        """Create ``name`` with ``num.partitions`` (Metadata's auto-creation)."""
        ...

    def delete_topic(self, name: str) -> None:
        """Delete the topic, answering the long polls that read it first."""
        ...

    def on_append(self, topic: str, partition: int) -> None:
        """Records were appended: wake the fetches waiting on that partition."""
        ...

    def flush_logs(self, logs: "Sequence[Log]") -> "list[asyncio.Future[FlushResult]]":
        """fsync ``logs`` off the event loop (``flush.messages``): one future per log, done
        once what was appended to it before the call is on disk (None) or the fsync failed
        (its OSError). See ``pulllog.broker.flusher``."""
        ...

    def defer_flush(self, log: "Log") -> None:
        """An append of the broker's own (group or transaction coordinator, a transaction
        marker) made ``flush.messages`` due: start its fsync off the event loop. A request
        that appended inside :meth:`collect_flushes` answers only after it; elsewhere
        (rebalances, housekeeping) nothing waits and a failure is logged."""
        ...

    def collect_flushes(self) -> "AbstractContextManager[list[tuple[Log, asyncio.Future[FlushResult]]]]":
        """``with broker.collect_flushes() as flushes: <coordinator call>``: the fsyncs that
        call made due, each with its future, for the request to await before it answers.
        The call inside does not await, so nothing else's fsyncs get in. Empty when no flush
        was due: then nothing waits."""
        ...

    def next_producer_id(self) -> int: ...

    async def wait_for_fetch(self, op: "DelayedOperation", partitions: Iterable[tuple[str, int]]) -> None:
        """Park a long-poll Fetch in the fetch purgatory until it completes or expires."""
        ...
