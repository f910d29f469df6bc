"""The group coordinator: membership, generations, assignment hand-off, committed offsets.

This broker coordinates every group (FindCoordinator says so). The protocol, as Kafka's
classic consumer groups run it:

1. Members send JoinGroup. A new dynamic member first gets MEMBER_ID_REQUIRED with an id
   to use (KIP-394), then joins with it (or is forgotten after its session timeout). A join
   that changes membership starts a rebalance (state PreparingRebalance): the others learn
   of it from their heartbeats (REBALANCE_IN_PROGRESS) and rejoin.
2. The join phase ends when every member has rejoined, or at the largest rebalance timeout
   (stragglers are dropped); the first one of an Empty group waits
   ``group.initial.rebalance.delay.ms`` for more members. The generation goes up, a protocol
   every member supports is chosen, and every JoinGroup is answered; the leader's answer
   lists the members and their subscriptions (state CompletingRebalance).
3. The leader computes the assignment (client-side assignors) and sends it in SyncGroup;
   every member's SyncGroup is answered with its own part (state Stable).
4. Members heartbeat within ``session.timeout.ms``; one that stops is removed and the group
   rebalances. Members commit offsets in Stable and while a rebalance is being prepared
   (commit on revoke), not between the join and their new assignment. A static member
   (``group.instance.id``) that restarts within its session timeout takes its old place and
   assignment without a rebalance (KIP-345); the incarnation it replaced is fenced.

The API that handlers call is one method per Kafka group API, each taking a frozen request
dataclass and returning a frozen result dataclass named after it (``JoinRequest`` ->
``JoinResult``, ``SyncRequest`` -> ``SyncResult``, ``HeartbeatRequest`` -> ``HeartbeatResult``,
``LeaveGroupRequest``, ``OffsetCommitRequest``, ``OffsetFetchRequest``, ``OffsetDeleteRequest``,
``DescribeGroupsRequest``, ``ListGroupsRequest``, ``DeleteGroupsRequest``, each -> ``...Result``);
results list partitions, members and groups in the request's order. Never the live ``Group`` and
``Member`` records, which only the coordinator changes.

Timeouts (the join deadline, each member's session) are delayed operations in the
purgatory's timing wheel. Offsets are appended to ``__consumer_offsets`` (compacted,
partition chosen by the group id's hash) and acknowledged once appended; they are cached in
memory and replayed from the topic on startup. So is each group's metadata record (written
when a generation's assignment is handed out, when the group empties, and when a static
member takes its place anew in a Stable group, as Kafka writes it): a restart loads the group
Stable with that generation, protocol, leader and members (their assignments and timeouts),
or Empty, and starts every loaded member's session then; members that heartbeat in time go
on without a rebalance, one that does not come back is removed after its session timeout.

``flush.messages`` (or the broker's ``log.flush.interval.messages``): in a broker, an append
that makes the flush due does not fsync here (the event loop never waits for the disk); the
log goes to ``flush_due`` and the handler of the request answers once the broker's worker
thread has fsynced it: OffsetCommit, TxnOffsetCommit, OffsetDelete and DeleteGroups (a
failed fsync answers as a failed append). Group metadata written by a rebalance is not
waited for: as before, its write is best effort (a failure is logged), so JoinGroup and
SyncGroup answer without waiting for the disk.

Offsets in transactions (KIP-98, TxnOffsetCommit): a transactional producer's offsets are
appended as a *transactional* batch carrying its producer id and epoch, and kept *pending*
per producer id: OffsetFetch does not see them (with ``require_stable``, v7+, a partition
with pending offsets is UNSTABLE_OFFSET_COMMIT instead), until the transaction coordinator
has written the marker into that ``__consumer_offsets`` partition and calls
``handle_txn_completion``: a commit makes them the committed offsets, an abort drops them.
When a transactional and a plain commit of one partition meet, the one whose record is later
in the log wins (as Kafka; compaction keeps the later record, so a restart agrees). Replay at
start follows the log: records of transactional batches are pending under the batch's
producer id until that producer's control batch (commit or abort marker) in the same
partition; a transaction whose marker is not in the log stays pending (the transaction
coordinator completes it after its own restart). A tombstone of a partition's offset also
drops the pending offsets of that partition.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..log import AppendInfo, Log
from ..log.log import wall_clock_ms
from ..log.producer_state import InvalidProducerEpochError, increment_sequence
from ..net.consumer_protocol import decode_subscription
from ..net.coordinator_keys import partition_for
from ..purgatory import DelayedOperation, DelayedOperationPurgatory
from ..records import build_batch
from ..records.batch import NO_SEQUENCE
from ..records.control import ControlType, read_control_record
from ..records.errors import InvalidRecordError
from ..records.decoding import DecodedRecord, decode_records
from . import records as rec
from .state import Event, GroupState, next_state

__all__ = [
    "OFFSETS_TOPIC",
    "GroupCoordinator",
    "GroupDescription",
    "GroupError",
    "CommittedOffset",
    "DeleteGroupsRequest",
    "DeleteGroupsResult",
    "DeletedGroup",
    "DescribeGroupsRequest",
    "DescribeGroupsResult",
    "FetchedOffset",
    "GroupOverview",
    "HeartbeatRequest",
    "HeartbeatResult",
    "JoinRequest",
    "JoinResult",
    "JoinedMember",
    "LeaveGroupRequest",
    "LeaveGroupResult",
    "LeftMember",
    "ListGroupsRequest",
    "ListGroupsResult",
    "MemberDescription",
    "MemberIdentity",
    "OffsetCommit",
    "OffsetCommitRequest",
    "OffsetCommitResult",
    "OffsetDeleteRequest",
    "OffsetDeleteResult",
    "OffsetFetchRequest",
    "OffsetFetchResult",
    "PartitionResult",
    "SyncRequest",
    "SyncResult",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResult",
]

log = logging.getLogger("pulllog.group")

OFFSETS_TOPIC = "__consumer_offsets"
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
OFFSET_METADATA_MAX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class _TxnMarker:
    """A control batch of ``__consumer_offsets``: the end of a producer's transaction."""

    producer_id: int
    commit: bool


LOAD_STEP = 1000
"""A cluster member's partition load pauses every this many entries (load_partition_in_steps)."""


def drain(steps: Generator[None, None, int]) -> int:
    """Run a load in steps to its end, at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _store_error(code: ErrorCode) -> ErrorCode:
    """A group metadata append's error as the member hears it (Kafka's storeGroup mapping):
    look the coordinator up again, retry later, or rejoin."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code is ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return code


def _log_entries(plog: Log) -> Iterable[tuple[int, DecodedRecord] | _TxnMarker]:
    """Every record of ``plog`` from its log start offset, across compaction's holes, in log
    order: (producer id of its batch when the batch is transactional, else -1; the record),
    and a :class:`_TxnMarker` for each transaction marker."""
    for batch in plog.batches_from_start():
        header = batch.header
        if header.is_control:
            try:
                marker = read_control_record(batch)
            except InvalidRecordError as exc:
                log.warning("%s: skipping an unreadable control batch at offset %d: %s",
                            plog.directory.name, header.base_offset, exc)
                continue
            if marker is not None and marker.type in (ControlType.COMMIT, ControlType.ABORT):
                yield _TxnMarker(header.producer_id, marker.type == ControlType.COMMIT)
            continue
        producer_id = header.producer_id if header.is_transactional else -1
        body = batch.payload()
        for record in decode_records(DecodedRecord, body, 0, len(body), header.records_count,
                                     header.base_offset, header.base_timestamp, 0, -1, OFFSETS_TOPIC, 0):
            yield producer_id, record


def _next_sequence(plog: Log, producer_id: int, producer_epoch: int) -> int:
    """The base sequence of the coordinator's next batch for ``producer_id`` in ``plog``.

    Kafka's coordinator appends with sequence 0 and its log skips sequence checks for the
    coordinator's own writes; pulllog's log checks every producer batch, so the coordinator,
    the only writer of this producer id in ``__consumer_offsets``, continues the producer's
    sequence there (0 for a new epoch or producer). An older epoch is left to the log to refuse."""
    entry = plog.producer_state.producers.get(producer_id)
    if entry is None or entry.epoch != producer_epoch or entry.last_seq == NO_SEQUENCE:
        return 0
    return increment_sequence(entry.last_seq, 1)


def _txn_append_error(exc: Exception) -> ErrorCode:
    """A TxnOffsetCommit's code for a failed append, as Kafka maps its coordinator's write errors."""
    if isinstance(exc, InvalidProducerEpochError):
        return ErrorCode.invalid_producer_epoch
    if isinstance(exc, OSError):
        return ErrorCode.not_coordinator  # Kafka's answer for KAFKA_STORAGE_ERROR: look it up again
    return ErrorCode.unknown_server_error


class GroupError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup, whatever its version. ``protocols``: (name, metadata) in preference order."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool
    """v4+ (KIP-394): a new dynamic member first gets MEMBER_ID_REQUIRED and its id."""
    supports_skip_assignment: bool = True
    """v9+ (KIP-814): a returning static leader may be told not to assign."""


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode = ErrorCode.none
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    """Every member with its subscription: for the leader only."""
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None
    assignments: Mapping[str, bytes]
    """member id -> assignment; only the leader sends any."""


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes
    protocol_type: str | None
    protocol_name: str | None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups' view of a group. As Kafka's GroupMetadata.summary: the protocol and each
    member's metadata and assignment only for a Stable group (mid-rebalance they are not settled
    yet); an unknown group is Dead with no members."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    error: ErrorCode = ErrorCode.none
    """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS from a cluster member that does not
    (yet) coordinate the group."""


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """ListGroups' view of a group."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in an OffsetCommit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """An OffsetCommit. A generation of -1 with no member id commits for a consumer that does
    not use group management (only into a group without members)."""

    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[OffsetCommit, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """A TxnOffsetCommit: offsets committed inside ``producer_id``'s transaction (pending until
    its marker). v0-v2 carry no member id and generation (-1 / "" here): the group's members
    are then not checked, as Kafka does; v3+ are checked like an OffsetCommit's."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[OffsetCommit, ...]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's answer in an OffsetCommit or OffsetDelete."""

    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    """An OffsetCommit's answer: one code per partition, in the request's order."""

    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResult:
    """A TxnOffsetCommit's answer: one code per partition, in the request's order."""

    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    """REBALANCE_IN_PROGRESS tells the member to rejoin."""


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """A member leaving: by member id, or (an admin, KIP-345) by group instance id alone."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    """The top-level code and one per member, in the request's order (v0-v2 answer the
    first member's code alone)."""

    error: ErrorCode
    members: tuple[LeftMember, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None
    """(topic, partition) pairs; None asks for every partition the group has committed."""
    require_stable: bool = False
    """v7+ (KIP-447): a partition with offsets pending in a transaction is answered
    UNSTABLE_OFFSET_COMMIT (the consumer retries) instead of its last committed offset."""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    committed: "CommittedOffset | None"
    """None: nothing committed (answered as offset -1)."""
    error: ErrorCode = ErrorCode.none
    """UNSTABLE_OFFSET_COMMIT for a partition with pending transactional offsets (require_stable)."""


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    """A group-level error (GROUP_ID_NOT_FOUND) comes alone, without partitions, as Kafka's."""

    error: ErrorCode
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple["GroupDescription", ...]


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: frozenset[str] = frozenset()
    """Group states to list (any case, as v4+ sends them); empty lists every state."""
    types_filter: frozenset[str] = frozenset()
    """Group types to list (v5+); every group here is "classic"; empty lists all."""


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    groups: tuple["GroupOverview", ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    groups: tuple[DeletedGroup, ...]


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[ErrorCode, bytes]] | None = None
    heartbeat: "DelayedTimeout | None" = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    record_offset: int = field(default=-1, compare=False)
    """Where the commit's record is in ``__consumer_offsets`` (-1: unknown). When a transaction
    commits, its offset replaces a partition's committed one only if its record is later."""


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    pending: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    """Offsets committed in ongoing transactions: producer id -> partition -> offset."""
    join_op: "DelayedJoin | None" = None
    new_member_added: bool = False  # during the initial rebalance delay
    state_timestamp: int = 0

    def transition(self, event: Event) -> None:
        self.state = next_state(self.state, event)
        self.state_timestamp = wall_clock_ms()

    def all_protocols_supported(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support."""
        candidates = self.all_protocols_supported()
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(votes, key=lambda n: votes[n])

    def has_pending(self, tp: tuple[str, int]) -> bool:
        """True while some transaction has an offset for ``tp`` pending."""
        return any(tp in offsets for offsets in self.pending.values())

    def drop_pending(self, tp: tuple[str, int]) -> None:
        """A tombstone of ``tp`` drops its pending offsets too (as Kafka's replay does)."""
        for producer_id, offsets in list(self.pending.items()):
            offsets.pop(tp, None)
            if not offsets:
                del self.pending[producer_id]

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None if unknown."""
        if self.protocol_type != "consumer" or not self.protocol_name:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            topics |= set(_consumer_subscription_topics(m.metadata_for(self.protocol_name)))
        return topics


def _restore_group(group: Group, meta: rec.GroupMetadataValue) -> None:
    """Set ``group`` to what its latest metadata record says, as Kafka's GroupMetadataManager
    loads a group: Stable with the record's generation, protocol, leader and members (each
    with its subscription, assignment and timeouts) when it lists members, else Empty. The
    record is written when a generation's assignment is handed out (and when a static member
    takes its place anew), so a member that heartbeats in time finds its generation again;
    a rebalance cut short by the restart is not in it, and its members join again."""
    protocol_type = meta.protocol_type or None
    members = {m.member_id: Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.session_timeout_ms, m.rebalance_timeout_ms, protocol_type or "",
                                   [(meta.protocol or "", m.subscription)], assignment=m.assignment)
               for m in meta.members}
    group.generation, group.protocol_type = meta.generation, protocol_type
    group.protocol_name = meta.protocol if members else None
    group.leader_id = meta.leader if members else None
    group.members = members
    group.static_members = {m.group_instance_id: m.member_id for m in members.values()
                            if m.group_instance_id is not None}
    group.pending_members.clear()
    group.state = GroupState.STABLE if members else GroupState.EMPTY
    group.state_timestamp = meta.state_timestamp


def _new_member_id(group_instance_id: str | None, client_id: str) -> str:
    """As Kafka: a static member's id starts with its group instance id, a dynamic one's with
    its client id."""
    return f"{group_instance_id or client_id or 'member'}-{uuid.uuid4()}"


def _consumer_subscription_topics(data: bytes) -> tuple[str, ...]:
    """Topics of a ConsumerProtocolSubscription; none when a member sent something else
    (the coordinator stores member metadata opaquely and must not fail on it)."""
    try:
        return decode_subscription(data).topics
    except ValueError:
        return ()


class DelayedJoin(DelayedOperation):
    """The join phase: complete once every known member has rejoined, or at the deadline.

    The first rebalance of an Empty group is an *initial* join (``initial_remaining_ms`` set):
    it waits the whole ``group.initial.rebalance.delay.ms`` so that members starting together
    share the first generation, and waits another delay while new members keep arriving, never
    beyond the rebalance timeout (Kafka's InitialDelayedJoin)."""

    def __init__(self, coordinator: "GroupCoordinator", group: Group, delay_ms: int,
                 initial_remaining_ms: int | None = None) -> None:
        super().__init__(delay_ms)
        self.coordinator, self.group = coordinator, group
        self.initial_remaining_ms = initial_remaining_ms

    def try_complete(self) -> bool:
        if self.initial_remaining_ms is not None:
            return False
        if all(m.awaiting_join for m in self.group.members.values()) and not self.group.pending_members:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        group, remaining = self.group, self.initial_remaining_ms
        if remaining and group.new_member_added and group.state is GroupState.PREPARING_REBALANCE:
            group.new_member_added = False
            delay = min(self.coordinator.initial_rebalance_delay_ms, remaining)
            group.join_op = DelayedJoin(self.coordinator, group, delay, max(remaining - delay, 0))
            self.coordinator.purgatory.try_complete_else_watch(group.join_op, [("join", group.group_id)])
            return
        self.coordinator._complete_join(group)


class DelayedTimeout(DelayedOperation):
    """A deadline and nothing else: ``on_timeout`` runs unless the operation is cancelled
    first. A member's session (each heartbeat cancels it and starts the next), and the
    session timeout of a member told its id (MEMBER_ID_REQUIRED), after which it is
    forgotten so that the join phase stops waiting for it."""

    def __init__(self, delay_ms: int, on_timeout: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.on_timeout = on_timeout

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.on_timeout()


class TopicStore(Protocol):
    """What the coordinator needs of the broker's topics: the logs of ``__consumer_offsets``,
    and to create it on the first commit. The broker's TopicManager is one; the coordinator
    sits below the broker and never sees the rest of it."""

    def partition_logs(self, name: str) -> Sequence[Log] | None:
        """The topic's partition logs in partition order, or None when it does not exist."""

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> object:
        ...

    def offline_reason(self, name: str) -> str | None:
        """Why the topic is on disk but offline (a degraded start), or None when it is not."""

    def hosted_log(self, name: str, index: int) -> Log | None:
        """A cluster member's log of partition ``index``, or None when it holds none (online)."""


class GroupCoordinator:
    def __init__(
        self,
        topics: TopicStore,
        purgatory: DelayedOperationPurgatory[Any, Any],
        *,
        offsets_partitions: int = 50,
        initial_rebalance_delay_ms: int = 0,
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        clock: Callable[[], int] = wall_clock_ms,
        flush_due: Callable[[Log], None] | None = None,
        owner: Callable[[int], ErrorCode] | None = None,
        appended: Callable[[Log], None] | None = None,
        durably: "Callable[[Callable[[], ErrorCode]], asyncio.Future[ErrorCode]] | None" = None,
    ) -> None:
        self.topics = topics
        self.appended = appended
        self.durably = durably
        """A cluster member's: ``durably(write)`` runs ``write`` (which appends a group's
        metadata record) at once and gives a future of the append's fate once the ISR has it
        (or its fsync is done): NONE, or the replication's (or the storage's) error code. The
        answers that depend on the record (SyncGroup, a static member's JoinGroup) wait for
        it, as Kafka's storeGroup appends with acks=all. None: answered after the append."""
        """A cluster member's: told of every append (a replicated log's leader), so the
        request that made it answers once the ISR has it (acks=all, as Kafka's coordinator)."""
        self.owner = owner
        """A cluster member's: for a ``__consumer_offsets`` partition, NONE when this broker
        leads it (and has loaded it), else NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
        The partition count is then ``offsets_partitions`` (the cluster's), not the local
        topic's (a cluster member holds only the partitions it is a replica of). None: a
        single broker, which coordinates every group."""
        self.purgatory = purgatory
        self.flush_due = flush_due
        """Given, an append that makes ``flush.messages`` due does not fsync: the log goes to
        this callable (the broker fsyncs it off the event loop and the request answers after).
        None: the append fsyncs inline, as ``Log.append`` does."""
        self.offsets_partitions = offsets_partitions
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.offsets_retention_ms = offsets_retention_ms
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self._open_txns: dict[int, set[str]] = {}
        """producer id -> the groups holding offsets pending in its transaction."""

    # ------------------------------------------------------------------ offsets topic

    def _offsets_log(self, group_id: str) -> Log:
        if self.owner is not None:  # a cluster member holds the partitions it is a replica of
            index = partition_for(group_id, self.offsets_partitions)
            plog = self.topics.hosted_log(OFFSETS_TOPIC, index)
            if plog is None or self.owner(index) is not ErrorCode.none:
                # Leadership moved between the request's check and its append.
                raise OSError(errno.EIO, f"{OFFSETS_TOPIC}-{index} is not led by this broker")
            return plog
        logs = self.topics.partition_logs(OFFSETS_TOPIC)
        if logs is None and (offline := self.topics.offline_reason(OFFSETS_TOPIC)) is not None:
            # On disk but offline (a degraded start): creating it afresh would hide every
            # committed offset; callers answer KAFKA_STORAGE_ERROR as for any storage error.
            raise OSError(errno.EIO, f"{OFFSETS_TOPIC} is offline: {offline}")
        if logs is None:
            self.topics.create(OFFSETS_TOPIC, self.offsets_partitions,
                               {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
            logs = self.topics.partition_logs(OFFSETS_TOPIC)
            assert logs is not None
        return logs[partition_for(group_id, len(logs))]

    def _append(self, group_id: str, pairs: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Append one batch of records; returns the offset of the first."""
        now = self.clock()
        return self._append_batch(self._offsets_log(group_id), build_batch([(k, v, now) for k, v in pairs])).first_offset

    def _append_batch(self, plog: Log, batch: bytes) -> AppendInfo:
        """Append; with a ``flush_due``, a flush the append makes due goes to it (no fsync here)."""
        if self.flush_due is None:
            info = plog.append(batch)
        else:
            info = plog.append(batch, defer_flush=True)
            if plog.flush_messages_due:
                self.flush_due(plog)
        if self.appended is not None:
            self.appended(plog)
        return info

    def _append_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                              pairs: list[tuple[bytes, bytes]]) -> int:
        """Append one transactional batch of ``producer_id``; returns the offset of the first
        record. Raises the log's errors (an epoch older than the log knows for this producer
        is ``InvalidProducerEpochError``)."""
        plog = self._offsets_log(group_id)
        now = self.clock()
        batch = build_batch([(k, v, now) for k, v in pairs], producer_id=producer_id,
                            producer_epoch=producer_epoch,
                            base_sequence=_next_sequence(plog, producer_id, producer_epoch),
                            transactional=True)
        info = self._append_batch(plog, batch)
        if info.duplicate:  # cannot happen with the sequence above: never answer a commit not written
            raise InvalidRecordError(f"producer {producer_id}'s offsets batch was taken for a retry")
        return info.first_offset

    def _offsets_partition_count(self) -> int:
        """How many partitions ``__consumer_offsets`` has (as ``_offsets_log`` hashes group ids)."""
        if self.owner is not None:
            return self.offsets_partitions
        logs = self.topics.partition_logs(OFFSETS_TOPIC)
        return len(logs) if logs else self.offsets_partitions

    def ownership_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` (always, on a single broker)."""
        if self.owner is None:
            return ErrorCode.none
        return self.owner(partition_for(group_id, self.offsets_partitions))

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._offsets_partition_count())

    def set_partition_count(self, partitions: int) -> None:
        """A cluster member: how many partitions the cluster's ``__consumer_offsets`` has."""
        if partitions > 0:
            self.offsets_partitions = partitions

    def load_partition(self, index: int, leader_epoch: int = 0) -> int:
        """This broker became the leader of ``__consumer_offsets`` partition ``index``: replay
        it (to its log end, as Kafka's loading does), completing the transactions whose markers
        it holds, and start the loaded members' sessions now. Returns how many groups it holds."""
        return drain(self.load_partition_in_steps(index, leader_epoch))

    def load_partition_in_steps(self, index: int, leader_epoch: int = 0,
                                step: int = LOAD_STEP) -> Generator[None, None, int]:
        """:meth:`load_partition`, pausing (a ``yield``) every ``step`` entries, so that the
        broker serves other requests meanwhile. Until it returns, the broker answers this
        partition's groups COORDINATOR_LOAD_IN_PROGRESS; if it is abandoned midway, the
        broker unloads the partition (what it replayed goes)."""
        self.unload_partition(index)  # a stale copy of an earlier term
        plog = self.topics.hosted_log(OFFSETS_TOPIC, index)
        if plog is None:
            return 0
        count = self._offsets_partition_count()
        for seen, entry in enumerate(_log_entries(plog), 1):
            if isinstance(entry, _TxnMarker):
                self._complete_txn(entry.producer_id, {index}, entry.commit, count)
            else:
                producer_id, record = entry
                self._replay(record.key, record.value, record.offset, producer_id)
            if seen % step == 0:
                yield
        loaded = [g for g in self.groups.values() if partition_for(g.group_id, count) == index]
        for group in loaded:
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        return len(loaded)

    def set_partition_epoch(self, index: int, leader_epoch: int) -> None:
        """Still the leader of ``index`` in a new leader epoch: groups keep going (no epoch here)."""

    def unload_partition(self, index: int) -> int:
        """This broker no longer leads ``__consumer_offsets`` partition ``index``: forget its
        groups (their members find the new coordinator), stop their timers, and answer their
        waiting JoinGroup / SyncGroup NOT_COORDINATOR, as Kafka's onGroupUnloaded does."""
        count = self._offsets_partition_count()
        gone = [g for g in self.groups.values() if partition_for(g.group_id, count) == index]
        for group in gone:
            if group.join_op is not None:
                group.join_op.cancel()
                group.join_op = None
            for member in group.members.values():
                if member.heartbeat is not None:
                    member.heartbeat.cancel()
                    member.heartbeat = None
                if member.join_future is not None and not member.join_future.done():
                    member.join_future.set_result(JoinResult(ErrorCode.not_coordinator, member_id=member.member_id))
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result((ErrorCode.not_coordinator, b""))
            del self.groups[group.group_id]
        ids = {g.group_id for g in gone}
        for producer_id, group_ids in list(self._open_txns.items()):
            group_ids -= ids
            if not group_ids:
                del self._open_txns[producer_id]
        return len(gone)

    def load(self) -> int:
        """Replay ``__consumer_offsets`` into memory; returns how many groups were loaded.

        Runs before the broker listens, so it delays no request; records are decoded by
        the C decoder (``records.decoding``) when it is built. A transaction marker completes
        the producer's pending offsets of the groups in its partition, as it did live."""
        logs = self.topics.partition_logs(OFFSETS_TOPIC)
        if logs is None:
            return 0
        self.offsets_partitions = len(logs)
        for index, plog in enumerate(logs):
            for entry in _log_entries(plog):
                if isinstance(entry, _TxnMarker):
                    self._complete_txn(entry.producer_id, {index}, entry.commit, len(logs))
                else:
                    producer_id, record = entry
                    self._replay(record.key, record.value, record.offset, producer_id)
        # As Kafka's onGroupLoaded: each loaded member's session starts now, so a member that
        # heartbeats within its session timeout stays, and one that does not come back is
        # removed (and the group rebalances) as if it had stopped heartbeating here.
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        return len(self.groups)

    def _replay(self, key: bytes | None, value: bytes | None, record_offset: int = -1,
                producer_id: int = -1) -> None:
        """Apply one record; ``producer_id`` >= 0 for a record of a transactional batch."""
        if key is None:
            return
        try:
            decoded = rec.decode_key(key)
        except (ValueError, IndexError, UnicodeDecodeError):
            return
        if isinstance(decoded, rec.OffsetKey):
            group = self.groups.setdefault(decoded.group, Group(decoded.group))
            tp = (decoded.topic, decoded.partition)
            if value is None:
                group.offsets.pop(tp, None)
                group.drop_pending(tp)
                return
            v = rec.decode_offset_value(value)
            committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, record_offset)
            if producer_id >= 0:
                self._add_pending(group, producer_id, {tp: committed})
            else:
                group.offsets[tp] = committed
        else:
            if value is None:
                group = self.groups.get(decoded)
                if group is not None and not group.offsets and not group.pending:
                    del self.groups[decoded]
                return
            _restore_group(self.groups.setdefault(decoded, Group(decoded)), rec.decode_group_value(value))

    # ------------------------------------------------------------------ helpers

    def _group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    @staticmethod
    def _validate_member(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's rule for every request of a member: with an instance id, the member id must
        be the one that instance holds now; an older incarnation (replaced by a restart) is
        FENCED_INSTANCE_ID, which tells it to stop rather than rejoin and take the place back."""
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            return ErrorCode.none if current == member_id else ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        member.heartbeat = DelayedTimeout(member.session_timeout_ms, partial(self._session_expired, group, member))
        self.purgatory.try_complete_else_watch(member.heartbeat, [("member", group.group_id, member.member_id)])

    def _write_group_metadata(self, group: Group) -> None:
        """Best effort: a failure is logged (a rebalance's record is not waited for)."""
        self._store_group(group)

    async def _store_group_durably(self, group: Group) -> ErrorCode:
        """Append the group's metadata record; its error, once the ISR has it (``durably``),
        mapped as Kafka's storeGroup maps it for the member."""
        if self.durably is None:
            return self._store_group(group)
        return _store_error(await self.durably(lambda: self._store_group(group)))

    def _store_group(self, group: Group) -> ErrorCode:
        """Append the group's metadata record; NOT_COORDINATOR when the log refuses it (Kafka's
        answer for a storage error: find the coordinator again)."""
        members = tuple(
            rec.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata_for(group.protocol_name or ""), m.assignment)
            for m in group.members.values())
        value = rec.GroupMetadataValue(group.protocol_type or "", group.generation, group.protocol_name,
                                       group.leader_id, self.clock(), members)
        try:
            self._append(group.group_id, [(rec.encode_group_key(group.group_id), rec.encode_group_value(value))])
        except OSError as exc:
            log.error("could not persist metadata of group %s: %s", group.group_id, exc)
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # ------------------------------------------------------------------ JoinGroup

    async def join(self, request: JoinRequest) -> JoinResult:
        """Answer one JoinGroup; waits until the join phase ends (or answers at once)."""
        group_id, member_id, group_instance_id = request.group_id, request.member_id, request.group_instance_id
        client_id, client_host, protocol_type = request.client_id, request.client_host, request.protocol_type
        session_timeout_ms, rebalance_timeout_ms = request.session_timeout_ms, request.rebalance_timeout_ms
        protocols = list(request.protocols)
        supports_skip_assignment = request.supports_skip_assignment
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id=member_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id)
        if not protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return JoinResult(not_ours, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id)
        if group.members and (group.protocol_type != protocol_type or
                              not ({n for n, _ in protocols} & group.all_protocols_supported())):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if member_id and member_id not in group.members and member_id not in group.pending_members:
            known = group_instance_id is not None and group_instance_id in group.static_members
            # A static member presenting an old member id was replaced by a newer instance.
            return JoinResult(ErrorCode.fenced_instance_id if known else ErrorCode.unknown_member_id,
                              member_id=member_id)

        if not member_id:
            if group_instance_id is not None and group_instance_id in group.static_members:
                return await self._static_rejoin(group, group_instance_id, client_id, client_host,
                                                 session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                                                 supports_skip_assignment)
            new_id = _new_member_id(group_instance_id, client_id)
            if group_instance_id is None and request.require_known_member_id:
                group.pending_members.add(new_id)
                self.purgatory.try_complete_else_watch(
                    DelayedTimeout(session_timeout_ms, partial(self._forget_pending_member, group, new_id)),
                    [("pending", group_id, new_id)])
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            member_id = new_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.purgatory.cancel_for_key(("pending", group_id, member_id))
        member = group.members.get(member_id)
        loop = asyncio.get_running_loop()
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, list(protocols))
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
            if group.protocol_type is None or len(group.members) == 1:
                group.protocol_type = protocol_type
            if group.state is GroupState.PREPARING_REBALANCE:
                group.new_member_added = True
            self._schedule_heartbeat(group, member)
            member.join_future = loop.create_future()
            self._prepare_rebalance(group)
        else:
            changed = member.protocols != list(protocols)
            member.protocols = list(protocols)
            member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            member.client_id, member.client_host = client_id, client_host
            self._schedule_heartbeat(group, member)
            if group.state is GroupState.PREPARING_REBALANCE:
                if member.join_future is None or member.join_future.done():
                    member.join_future = loop.create_future()
            elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and not changed \
                    and member_id != group.leader_id:
                # Nothing changed: answer with the current generation (as Kafka does).
                return self._join_result(group, member)
            else:
                member.join_future = loop.create_future()
                self._prepare_rebalance(group)
        self.purgatory.check_and_complete(("join", group_id))
        future = member.join_future
        assert future is not None
        return await future

    async def _static_rejoin(self, group: Group, instance_id: str, client_id: str, client_host: str,
                             session_ms: int, rebalance_ms: int, protocol_type: str,
                             protocols: list[tuple[str, bytes]], supports_skip_assignment: bool) -> JoinResult:
        """A static member came back (restart): new member id, same place, no rebalance when
        the group is stable and the protocol it would select stays the one in use (Kafka's
        rule). The new member id is written to the group's metadata record, so that a
        coordinator restart does not load the old one and fence the running instance; if that
        write fails the old member is put back and the join answered with the error, as Kafka.

        A returning leader must not compute a new assignment: a stable group would never hand
        it out. JoinGroup v9+ says so with skip_assignment (KIP-814); older versions answer
        with the leader id it had before, so the new member id does not see itself as leader."""
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
        new_id = _new_member_id(instance_id, client_id)
        member = Member(new_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                        protocol_type, list(protocols), assignment=old.assignment)
        old_leader = group.leader_id
        self._replace_static_member(group, old, member)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            error = await self._store_group_durably(group)
            if self.groups.get(group.group_id) is not group:  # unloaded meanwhile: leadership moved
                return JoinResult(ErrorCode.not_coordinator, member_id=new_id)
            if error is not ErrorCode.none:
                if group.members.get(new_id) is member:
                    self._replace_static_member(group, member, old)
                return JoinResult(error, group.generation, group.protocol_type, group.protocol_name,
                                  old_leader or "", "")
            result = self._join_result(group, member)
            if member.member_id == group.leader_id:
                if supports_skip_assignment:
                    return replace(result, skip_assignment=True)
                return replace(result, leader=old_id, members=())
            return result
        member.join_future = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group)
        self.purgatory.check_and_complete(("join", group.group_id))
        return await member.join_future

    def _replace_static_member(self, group: Group, old: Member, new: Member) -> None:
        """``new`` takes ``old``'s place (and leadership) under their group instance id."""
        group.members.pop(old.member_id, None)
        if old.heartbeat is not None:
            old.heartbeat.cancel()
        group.members[new.member_id] = new
        assert new.group_instance_id is not None
        group.static_members[new.group_instance_id] = new.member_id
        if group.leader_id == old.member_id:
            group.leader_id = new.member_id
        self._schedule_heartbeat(group, new)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if member.member_id == group.leader_id:
            members = tuple(JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name or ""))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member.member_id, members)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting in SyncGroup must rejoin.
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result((ErrorCode.rebalance_in_progress, b""))
        if group.state is not GroupState.PREPARING_REBALANCE:
            was_empty = group.state is GroupState.EMPTY
            group.transition(Event.REBALANCE)
            log.info("group %s: rebalancing (generation %d, %d member(s))",
                     group.group_id, group.generation, len(group.members))
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            if was_empty and self.initial_rebalance_delay_ms > 0:
                delay = min(timeout, self.initial_rebalance_delay_ms)
                group.new_member_added = False
                group.join_op = DelayedJoin(self, group, max(delay, 1), max(timeout - delay, 0))
            else:
                group.join_op = DelayedJoin(self, group, max(timeout, 1))
            self.purgatory.try_complete_else_watch(group.join_op, [("join", group.group_id)])

    def _complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        for m in list(group.members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                self._remove_member(group, m, rebalance=False)
        group.pending_members.clear()
        if not group.members:
            group.generation += 1
            group.protocol_name = None
            group.leader_id = None
            group.transition(Event.ALL_MEMBERS_GONE)
            self._write_group_metadata(group)
            return
        group.generation += 1
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(Event.JOIN_COMPLETE)
        for m in group.members.values():
            m.assignment = b""
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(self._join_result(group, m))
            self._schedule_heartbeat(group, m)
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name, group.leader_id)

    # ------------------------------------------------------------------ SyncGroup

    async def sync(self, request: SyncRequest) -> SyncResult:
        """Answer one SyncGroup: the member's assignment, once the leader has handed it in."""
        error, assignment = await self._sync(request.group_id, request.generation, request.member_id,
                                             request.group_instance_id, request.assignments)
        group = self.groups.get(request.group_id)
        return SyncResult(error, assignment, group.protocol_type if group else None,
                          group.protocol_name if group else None)

    async def _sync(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                    assignments: Mapping[str, bytes]) -> tuple[ErrorCode, bytes]:
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return not_ours, b""
        group = self._group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, b""
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error, b""
        member = group.members[member_id]
        if generation != group.generation:
            return ErrorCode.illegal_generation, b""
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress, b""
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.STABLE:
            return ErrorCode.none, member.assignment
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return ErrorCode.unknown_member_id, b""
        member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            if self.durably is None:
                group.transition(Event.SYNC_COMPLETE)
                self._write_group_metadata(group)
                self._propagate_assignment(group, ErrorCode.none)
            else:  # Stable once the ISR has the record, as Kafka's storeGroup callback
                stored = self.durably(lambda: self._store_group(group))
                stored.add_done_callback(partial(self._group_stored, group, group.generation))
        return await member.sync_future

    def _group_stored(self, group: Group, generation: int, stored: "asyncio.Future[ErrorCode]") -> None:
        """The leader's SyncGroup record is in the ISR (or failed): the group becomes Stable
        and every member waiting in SyncGroup gets its assignment; or, on a failure, the error
        (as Kafka maps it) and a new rebalance. Nothing if the group moved on meanwhile (a
        member joined or left: those waiting were answered then; or it was unloaded)."""
        if (self.groups.get(group.group_id) is not group or group.generation != generation
                or group.state is not GroupState.COMPLETING_REBALANCE):
            return
        error = _store_error(stored.result()) if not stored.cancelled() else ErrorCode.coordinator_not_available
        if error is ErrorCode.none:
            group.transition(Event.SYNC_COMPLETE)
            self._propagate_assignment(group, ErrorCode.none)
            return
        log.error("group %s: its metadata record was not stored (%s); rebalancing", group.group_id, error.name)
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)
        self._prepare_rebalance(group)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((error, m.assignment))

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """Keep the member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        return HeartbeatResult(self._heartbeat(request.group_id, request.generation, request.member_id,
                                               request.group_instance_id))

    def _heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return not_ours
        group = self._group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        # Kafka's order: a heartbeat from an older generation is ILLEGAL_GENERATION (the member
        # must rejoin) even while a rebalance is prepared, and it does not keep the member alive.
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._schedule_heartbeat(group, group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, request: LeaveGroupRequest) -> LeaveGroupResult:
        """Remove members (a rebalance for the others); one code per member, in order."""
        if (not_ours := self.ownership_error(request.group_id)) is not ErrorCode.none:
            return LeaveGroupResult(not_ours, tuple(LeftMember(m.member_id, m.group_instance_id, not_ours)
                                                    for m in request.members))
        codes = self._leave(request.group_id, request.members)
        return LeaveGroupResult(ErrorCode.none, tuple(
            LeftMember(m.member_id, m.group_instance_id, code) for m, code in zip(request.members, codes)))

    def _leave(self, group_id: str, members: Iterable[MemberIdentity]) -> list[ErrorCode]:
        group = self._group(group_id)
        if group is None:
            # Kafka: the request succeeds, each member is unknown (v0-v2 answer the member's code).
            return [ErrorCode.unknown_member_id for _ in members]
        results = []
        for identity in members:
            member_id, instance_id = identity.member_id, identity.group_instance_id
            if not member_id and instance_id is not None:  # removed by instance id (an admin)
                member_id = group.static_members.get(instance_id, "")
            if instance_id is None and member_id in group.pending_members:
                self.purgatory.cancel_for_key(("pending", group_id, member_id))
                self._forget_pending_member(group, member_id)
                results.append(ErrorCode.none)
                continue
            error = self._validate_member(group, member_id, instance_id)
            if error is not ErrorCode.none:
                results.append(error)
                continue
            member = group.members[member_id]
            log.info("group %s: member %s left", group_id, member_id)
            self._remove_member(group, member, rebalance=True)
            results.append(ErrorCode.none)
        return results

    def _forget_pending_member(self, group: Group, member_id: str) -> None:
        if member_id not in group.pending_members:
            return
        group.pending_members.discard(member_id)
        log.info("group %s: member %s never joined with its member id; forgetting it", group.group_id, member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self.purgatory.check_and_complete(("join", group.group_id))

    def _session_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join:
            self._schedule_heartbeat(group, member)  # it is waiting for us, not gone
            return
        log.info("group %s: member %s missed its session timeout (%d ms); removing it",
                 group.group_id, member.member_id, member.session_timeout_ms)
        self._remove_member(group, member, rebalance=True)

    def _remove_member(self, group: Group, member: Member, *, rebalance: bool) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        for fut in (member.join_future, member.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(ErrorCode.unknown_member_id) if fut is member.join_future
                               else (ErrorCode.unknown_member_id, b""))  # type: ignore[arg-type]
        if not rebalance:
            return
        if not group.members:
            if group.join_op is not None:
                group.join_op.cancel()
            group.leader_id = None
            group.protocol_name = None
            if group.state is not GroupState.EMPTY:
                group.generation += 1
                group.transition(Event.ALL_MEMBERS_GONE)
                self._write_group_metadata(group)
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self.purgatory.check_and_complete(("join", group.group_id))
        else:
            self._prepare_rebalance(group)

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResult:
        """Append the offsets to ``__consumer_offsets``: durable when this returns, or (with a
        ``flush_due``) once the broker's flush of the log is done.
        Answers one code per partition, in the request's order."""
        codes = self._commit_offsets(request)
        return OffsetCommitResult(tuple(PartitionResult(o.topic, o.partition, codes[(o.topic, o.partition)])
                                        for o in request.offsets))

    def _commit_offsets(self, request: OffsetCommitRequest) -> dict[tuple[str, int], ErrorCode]:
        group_id, generation, member_id = request.group_id, request.generation, request.member_id
        group_instance_id, offsets = request.group_instance_id, request.offsets
        group = self.groups.get(group_id)
        error = self.ownership_error(group_id) if group_id else ErrorCode.none
        if error is ErrorCode.none:
            error = self._commit_error(group, group_id, generation, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return {(o.topic, o.partition): error for o in offsets}
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id)
        if group.members and member_id in group.members:
            self._schedule_heartbeat(group, group.members[member_id])
        results: dict[tuple[str, int], ErrorCode] = {}
        pairs = []
        now = self.clock()
        accepted = []
        for o in offsets:
            topic, partition, offset, epoch, metadata = o.topic, o.partition, o.offset, o.leader_epoch, o.metadata
            if metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                results[(topic, partition)] = ErrorCode.offset_metadata_too_large
                continue
            value = rec.OffsetValue(offset, epoch, metadata or "", now)
            pairs.append((rec.encode_offset_key(group_id, topic, partition), rec.encode_offset_value(value)))
            accepted.append(((topic, partition), CommittedOffset(offset, epoch, metadata or "", now)))
        if pairs:
            try:
                first = self._append(group_id, pairs)
            except OSError as exc:
                log.error("offset commit for group %s failed: %s", group_id, exc)
                for tp, _ in accepted:
                    results[tp] = ErrorCode.kafka_storage_error
                return results
            accepted = [(tp, replace(c, record_offset=first + i)) for i, (tp, c) in enumerate(accepted)]
        for tp, committed in accepted:
            group.offsets[tp] = committed
            results[tp] = ErrorCode.none
        return results

    def _commit_error(self, group: Group | None, group_id: str, generation: int, member_id: str,
                      group_instance_id: str | None) -> ErrorCode:
        """Kafka's checks of an OffsetCommit, in Kafka's order."""
        if not group_id:
            return ErrorCode.invalid_group_id
        if generation < 0 and not member_id and group_instance_id is None:
            # A consumer without group management: only into a group that has no members.
            return ErrorCode.unknown_member_id if group is not None and group.members else ErrorCode.none
        if group is None:
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation != group.generation:
            return ErrorCode.illegal_generation
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The member has its new generation but not its assignment yet: it owns nothing.
            # While the group only prepares a rebalance, members still own their partitions
            # and commit what they processed before giving them up (commit on revoke).
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResult:
        """The committed offsets asked for (None for a partition without one), in the request's
        order; with no partitions named, every partition the group has committed. Offsets
        pending in a transaction are never answered; with ``require_stable`` a partition that
        has some is UNSTABLE_OFFSET_COMMIT."""
        if (not_ours := self.ownership_error(request.group_id)) is not ErrorCode.none:
            return OffsetFetchResult(not_ours, ())
        group = self.groups.get(request.group_id)
        offsets = group.offsets if group is not None else {}
        wanted = offsets if request.partitions is None else request.partitions
        fetched = []
        for topic, partition in wanted:
            if request.require_stable and group is not None and group.has_pending((topic, partition)):
                fetched.append(FetchedOffset(topic, partition, None, ErrorCode.unstable_offset_commit))
            else:
                fetched.append(FetchedOffset(topic, partition, offsets.get((topic, partition))))
        return OffsetFetchResult(ErrorCode.none, tuple(fetched))

    # ------------------------------------------------------------------ offsets in transactions

    def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResult:
        """Append the offsets as a transactional batch of the request's producer and keep them
        pending until ``handle_txn_completion``. One code per partition, in the request's order."""
        codes = self._txn_offset_commit(request)
        return TxnOffsetCommitResult(tuple(PartitionResult(o.topic, o.partition, codes[(o.topic, o.partition)])
                                           for o in request.offsets))

    def _txn_offset_commit(self, request: TxnOffsetCommitRequest) -> dict[tuple[str, int], ErrorCode]:
        group_id, offsets = request.group_id, request.offsets
        group = self._group(group_id)
        error = self.ownership_error(group_id) if group_id else ErrorCode.none
        if error is ErrorCode.none:
            error = self._txn_commit_error(group, request)
        if error is not ErrorCode.none:
            return {(o.topic, o.partition): error for o in offsets}
        if group is None:
            # A producer committing for a consumer without group management: a "simple" group.
            group = self.groups[group_id] = Group(group_id)
        results: dict[tuple[str, int], ErrorCode] = {}
        pairs: list[tuple[bytes, bytes]] = []
        accepted: list[tuple[tuple[str, int], CommittedOffset]] = []
        now = self.clock()
        for o in offsets:
            tp = (o.topic, o.partition)
            if o.metadata is not None and len(o.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            value = rec.OffsetValue(o.offset, o.leader_epoch, o.metadata or "", now)
            pairs.append((rec.encode_offset_key(group_id, o.topic, o.partition), rec.encode_offset_value(value)))
            accepted.append((tp, CommittedOffset(o.offset, o.leader_epoch, o.metadata or "", now)))
        if not pairs:
            return results
        try:
            first = self._append_transactional(group_id, request.producer_id, request.producer_epoch, pairs)
        except (OSError, InvalidRecordError) as exc:
            code = _txn_append_error(exc)
            log.warning("transactional offset commit of group %s (producer %d, epoch %d) failed: %s (%s)",
                        group_id, request.producer_id, request.producer_epoch, exc, code.name)
            results.update({tp: code for tp, _ in accepted})
            return results
        self._add_pending(group, request.producer_id,
                          {tp: replace(c, record_offset=first + i) for i, (tp, c) in enumerate(accepted)})
        results.update({tp: ErrorCode.none for tp, _ in accepted})
        return results

    def _txn_commit_error(self, group: Group | None, request: TxnOffsetCommitRequest) -> ErrorCode:
        """Kafka's checks of a TxnOffsetCommit, in Kafka's order. Unlike OffsetCommit, the group's
        state is not checked, and without member id and generation (v0-v2) neither are members."""
        generation, member_id, instance_id = request.generation, request.member_id, request.group_instance_id
        if not request.group_id:
            return ErrorCode.invalid_group_id
        if group is None:
            # Kafka: -1 creates a simple group; a generation for a group it does not know is stale.
            return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
        if generation < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.none
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error is not ErrorCode.none:
                return error
            if generation != group.generation:
                return ErrorCode.illegal_generation
        return ErrorCode.none

    def _add_pending(self, group: Group, producer_id: int, offsets: Mapping[tuple[str, int], CommittedOffset]) -> None:
        group.pending.setdefault(producer_id, {}).update(offsets)
        self._open_txns.setdefault(producer_id, set()).add(group.group_id)

    def handle_txn_completion(self, producer_id: int, offsets_partitions: Iterable[int], commit: bool) -> None:
        """The transaction coordinator wrote ``producer_id``'s marker into these
        ``__consumer_offsets`` partitions: its pending offsets in the groups they hold become
        the committed ones (commit) or are dropped (abort). A partition's offset committed by
        a record later in the log than the transaction's stays (Kafka's rule)."""
        if producer_id in self._open_txns:
            self._complete_txn(producer_id, set(offsets_partitions), commit, self._offsets_partition_count())

    def _complete_txn(self, producer_id: int, partitions: set[int], commit: bool, partition_count: int) -> None:
        group_ids = self._open_txns.get(producer_id)
        if not group_ids:
            return
        done = {g for g in group_ids if partition_for(g, partition_count) in partitions}
        for group_id in done:
            group = self.groups.get(group_id)
            pending = group.pending.pop(producer_id, None) if group is not None else None
            if group is None or pending is None or not commit:
                continue
            for tp, offset in pending.items():
                current = group.offsets.get(tp)
                if current is None or offset.record_offset > current.record_offset:
                    group.offsets[tp] = offset
        group_ids -= done
        if not group_ids:
            del self._open_txns[producer_id]

    def delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResult:
        """Tombstone the group's offsets of partitions it does not consume (those are refused
        with GROUP_SUBSCRIBED_TO_TOPIC)."""
        top, codes = self._delete_offsets(request.group_id, request.partitions)
        if top is not ErrorCode.none:
            return OffsetDeleteResult(top, ())
        return OffsetDeleteResult(top, tuple(PartitionResult(t, p, codes[(t, p)]) for t, p in request.partitions))

    def _delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                        ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return not_ours, {}
        group = self._group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        subscribed = group.subscribed_topics() if group.state is not GroupState.EMPTY else set()
        results = {}
        tombstones = []
        for topic, partition in partitions:
            if subscribed and topic in subscribed:
                results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            if (topic, partition) in group.offsets or group.has_pending((topic, partition)):
                tombstones.append((rec.encode_offset_key(group_id, topic, partition), None))
            results[(topic, partition)] = ErrorCode.none
        if tombstones:
            self._append(group_id, tombstones)
            for key, _ in tombstones:
                decoded = rec.decode_key(key)
                assert isinstance(decoded, rec.OffsetKey)
                group.offsets.pop((decoded.topic, decoded.partition), None)
                group.drop_pending((decoded.topic, decoded.partition))
        return ErrorCode.none, results

    # ------------------------------------------------------------------ admin

    def list_groups(self, request: ListGroupsRequest) -> ListGroupsResult:
        """Every live group, filtered by state and type (v4+/v5+); every group is classic."""
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        if types and "classic" not in types:
            return ListGroupsResult(())
        return ListGroupsResult(tuple(
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values()
            if g.state is not GroupState.DEAD and (not states or g.state.value.lower() in states)))

    def describe(self, request: DescribeGroupsRequest) -> DescribeGroupsResult:
        """Each group's description, in the request's order (an unknown group is Dead)."""
        return DescribeGroupsResult(tuple(self._describe(group_id) for group_id in request.group_ids))

    def _describe(self, group_id: str) -> GroupDescription:
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return GroupDescription(group_id, "", "", "", (), not_ours)
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata_for(protocol) if stable else b"", m.assignment if stable else b"")
            for m in group.members.values())
        return GroupDescription(group_id, group.state.value, group.protocol_type or "",
                                protocol if stable else "", members)

    def delete_groups(self, request: DeleteGroupsRequest) -> DeleteGroupsResult:
        """Delete Empty groups with their offsets (NON_EMPTY_GROUP while members remain)."""
        return DeleteGroupsResult(tuple(DeletedGroup(g, self._delete_group(g)) for g in request.group_ids))

    def _delete_group(self, group_id: str) -> ErrorCode:
        if (not_ours := self.ownership_error(group_id)) is not ErrorCode.none:
            return not_ours
        group = self._group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        # Pending transactional offsets get a tombstone too: replay drops them with it.
        partitions = set(group.offsets).union(*group.pending.values())
        tombstones: list[tuple[bytes, bytes | None]] = [
            (rec.encode_offset_key(group_id, t, p), None) for (t, p) in partitions]
        tombstones.append((rec.encode_group_key(group_id), None))
        self._append(group_id, tombstones)
        group.transition(Event.DELETE)
        del self.groups[group_id]
        return ErrorCode.none

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets of Empty groups older than offsets.retention.minutes, then the Empty
        groups left without offsets (Kafka's cleanupGroupMetadata: such a group is Dead, and
        its metadata gets a tombstone so it does not come back when the log is replayed)."""
        now = self.clock() if now is None else now
        expired = 0
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY:
                continue
            # An offset with a transaction's offset pending for its partition is kept (as Kafka).
            old = [tp for tp, c in group.offsets.items()
                   if now - c.commit_timestamp > self.offsets_retention_ms and not group.has_pending(tp)]
            if old:
                self._append(group.group_id, [(rec.encode_offset_key(group.group_id, t, p), None) for t, p in old])
                for tp in old:
                    del group.offsets[tp]
                expired += len(old)
            if not group.offsets and not group.pending:
                self._append(group.group_id, [(rec.encode_group_key(group.group_id), None)])
                group.transition(Event.DELETE)
                del self.groups[group.group_id]
        return expired

    def shutdown(self) -> None:
        for group in self.groups.values():
            for m in group.members.values():
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()
