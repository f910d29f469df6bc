"""Consumer group membership, the client side: join, sync, heartbeat, rebalance, commit.

Delivery guarantee
------------------
As in the paper, pulllog's consumer groups deliver **at least once**. Every record is
processed at least once, and none is ever skipped (never a gap). After a crash, the
partition's next owner processes again the records processed since the last commit, so
duplicates are possible. An application that cares about duplicates removes them itself,
with the offsets it is handed or a unique key in the message.

Why there is no gap: a committed offset covers only records the application is done with,
and a partition's next owner starts from the committed offset. The consumer commits:

* what the application passes to ``commit(offsets)``, or, with no argument, the position of
  every assigned partition (calling ``commit()`` says "I am done with what I read");
* with ``enable_auto_commit``, every ``auto_commit_interval_ms`` and whenever partitions are
  revoked, the *processed* offsets. A record handed out by ``getmany()``, ``getone()`` or
  ``async for`` counts as processed once the application asks the consumer for more records
  (as Kafka's ``poll()``): the batch in the application's hands is not committed yet.

An application that passes records to other tasks and asks for more before they are done
turns auto-commit off and commits what those tasks finished.

Rebalances
----------
The member's states and what moves it between them are one table, in
:mod:`pulllog.client.member_state`: UNJOINED -> PREPARING_REBALANCE (JoinGroup in flight)
-> COMPLETING_REBALANCE (SyncGroup in flight) -> STABLE, and back to UNJOINED when the
generation ends. :class:`GroupMembership` turns answers into the table's events and carries
out the effects each transition names (reset the generation or the member id, lose the
partitions, start or stop heartbeats, join again); it never sets its state itself. It joins
again when a heartbeat says REBALANCE_IN_PROGRESS, the subscription or the partition counts
changed, after a cooperative revoke, or after a failed join.

The assignment and positions live in the consumer's
:class:`~pulllog.client.subscription_state.SubscriptionState`, which the membership shares
with the consumer and its fetcher: a rebalance adds, pauses and removes partitions there.

* Eager protocols (``range``, ``roundrobin``, custom assignors) revoke every partition
  before rejoining. Cooperative ones (``cooperative-sticky``, when every configured assignor
  is cooperative) keep consuming during the rebalance. After the assignment they revoke only
  the partitions that move, and then rejoin, so that the next rebalance hands those to their
  new owners.
* Revoking a partition: it is paused (no more records handed out, no more fetches); the
  consumer waits (up to ``rebalance_timeout_ms``) until the application has asked for more
  records, so that the batch in its hands counts as processed; the processed offset is
  committed (with auto-commit); then ``on_partitions_revoked`` runs, and the partition is
  dropped.
* Losing partitions (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: the group went on without this
  member, and another member may own them already): no commit. ``on_partitions_lost`` runs
  (``on_partitions_revoked`` if it is not set), and the member joins again.
* New partitions start at the group's committed offset, else per ``auto_offset_reset``.
* The leader runs the assignor of the group's protocol over every member's subscription,
  with the partition counts from fresh metadata. It watches those counts (every
  ``metadata_max_age_ms``) and rejoins when they change. Every member re-evaluates its
  pattern subscriptions as often and rejoins when the matching topics change.
* A static member (``group_instance_id``) does not send LeaveGroup on close. Restarted
  within its session timeout, it gets its old assignment back without a rebalance.
  FENCED_INSTANCE_ID (another consumer took that instance id) is fatal: the error goes to
  the application.

Tasks: :meth:`GroupMembership.run` (a child of the consumer's supervisor task) runs the join
loop in an ``asyncio.TaskGroup``. The heartbeat task (which also keeps the poll timer; it
sends Heartbeats only while the state table says so) and the auto-commit task are its
children, so cancelling ``run`` cancels and joins them all. ``commit_nowait()`` commits run
as children of the consumer's supervisor (:meth:`PartitionHost.spawn`), so they outlive an
``unsubscribe()`` and ``close()`` waits for them. Rebalance callbacks, sync or async, run in
the join loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from .assignors import ASSIGNORS, Assignor
from ..net.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .cluster import Cluster
from .errors import KafkaError, error_for
from .group_client import COORDINATOR_MOVED, CoordinatorUnavailableError, GroupClient
from .member_state import IN_GROUP, Effect, MemberEvent, MemberState, Transition, transition
from .subscription_state import SubscriptionSpec, SubscriptionState
from .types import TopicPartition

__all__ = [
    "AssignorSpec",
    "CommitFailedError",
    "FencedInstanceIdError",
    "GroupConfig",
    "GroupMembership",
    "MemberState",
    "OffsetAndMetadata",
    "PartitionHost",
    "RebalanceCallback",
    "SubscriptionSpec",
    "resolve_assignors",
]

log = logging.getLogger("pulllog.client")

RebalanceCallback = Callable[[set[TopicPartition]], Awaitable[None] | None]


class CommitFailedError(KafkaError):
    """The commit cannot succeed. The group rebalanced, or this member was removed from it,
    after the records were read, and their partitions may belong to another member now."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(code, message)
        self.retriable = False


class FencedInstanceIdError(KafkaError):
    """Another consumer joined with this consumer's ``group_instance_id``."""


class OffsetAndMetadata(NamedTuple):
    """An offset to commit, with a metadata string the group keeps with it."""

    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class AssignorSpec:
    """A partition assignment strategy: its protocol name, the function, and whether it is
    cooperative (incremental rebalances)."""

    name: str
    assign: Assignor
    cooperative: bool = False


def resolve_assignors(strategy: str | Callable[..., Any] | Iterable[str | Callable[..., Any]]
                      ) -> tuple[AssignorSpec, ...]:
    """Names ("range", "roundrobin", "cooperative-sticky"; a string may list several,
    comma-separated) or assignor callables. A callable is
    ``fn(members: {member_id: Subscription}, partitions: {topic: count}) -> {member_id: [(topic, p)]}``
    with optional attributes ``name`` (its protocol name, default ``__name__``) and
    ``cooperative`` (default False)."""
    items: list[Any]
    if isinstance(strategy, str):
        items = [s.strip() for s in strategy.split(",") if s.strip()]
    elif callable(strategy):
        items = [strategy]
    else:
        items = list(strategy)
    specs: list[AssignorSpec] = []
    for item in items:
        if isinstance(item, str):
            fn = ASSIGNORS.get(item)
            if fn is None:
                raise ValueError(f"unknown partition_assignment_strategy {item!r}: use one of "
                                 f"{', '.join(ASSIGNORS)}, or an assignor function")
            specs.append(AssignorSpec(item, fn, cooperative=item == "cooperative-sticky"))
        elif callable(item):
            name = getattr(item, "name", None) or getattr(item, "__name__", None)
            if not isinstance(name, str) or not name:
                raise ValueError(f"assignor {item!r} needs a name: give it a `name` attribute")
            specs.append(AssignorSpec(name, item, cooperative=bool(getattr(item, "cooperative", False))))
        else:
            raise TypeError(f"partition_assignment_strategy takes names or assignor functions, not {item!r}")
    if not specs:
        raise ValueError("partition_assignment_strategy is empty: give at least one, e.g. ('range',)")
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"partition_assignment_strategy names a protocol twice: {[s.name for s in specs]}")
    return tuple(specs)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 300_000
    assignors: tuple[AssignorSpec, ...] = ()
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000

    @property
    def cooperative(self) -> bool:
        """Kafka's rule: the cooperative protocol only if every assignor supports it."""
        return bool(self.assignors) and all(s.cooperative for s in self.assignors)


class PartitionHost(Protocol):
    """What the membership needs from the Consumer beyond the SubscriptionState they share
    (the assignment and positions are there)."""

    async def wait_processed(self, partitions: set[TopicPartition], timeout_s: float) -> bool:
        """Wait until the application has no unprocessed records of these; False on timeout."""

    def fail(self, error: BaseException) -> None:
        """A fatal group error: raise it to the application's next read."""

    def poll_activity(self) -> tuple[int, bool]:
        """(reads so far, whether a read is waiting for records now): Kafka's poll timer."""

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task the consumer owns (cancelled and joined by its close())."""


# ---------------------------------------------------------------------------- errors


# What an error answer to JoinGroup, SyncGroup, Heartbeat or OffsetCommit is, as an event of
# the member's state table (Kafka's AbstractCoordinator); anything missing is FATAL_ERROR.
_EVENTS: dict[ErrorCode, MemberEvent] = {
    ErrorCode.rebalance_in_progress: MemberEvent.REBALANCE_IN_PROGRESS,
    ErrorCode.illegal_generation: MemberEvent.ILLEGAL_GENERATION,
    ErrorCode.unknown_member_id: MemberEvent.UNKNOWN_MEMBER_ID,
    ErrorCode.fenced_instance_id: MemberEvent.FENCED_INSTANCE_ID,
    ErrorCode.not_coordinator: MemberEvent.COORDINATOR_LOST,
    ErrorCode.coordinator_not_available: MemberEvent.COORDINATOR_LOST,
    ErrorCode.coordinator_load_in_progress: MemberEvent.RETRIABLE_ERROR,
    ErrorCode.request_timed_out: MemberEvent.RETRIABLE_ERROR,
    ErrorCode.unknown_server_error: MemberEvent.RETRIABLE_ERROR,
}
# Of those, the ones that end the generation (the rest only need another JoinGroup).
_GENERATION_ENDING = frozenset({MemberEvent.ILLEGAL_GENERATION, MemberEvent.UNKNOWN_MEMBER_ID})


def _name(code: ErrorCode) -> str:
    return f"{code.name.upper()} ({int(code.value)})"


# ---------------------------------------------------------------------------- membership


class GroupMembership:
    def __init__(self, cluster: Cluster, config: GroupConfig, subscriptions: SubscriptionState,
                 host: PartitionHost, *, on_partitions_revoked: RebalanceCallback | None = None,
                 on_partitions_assigned: RebalanceCallback | None = None,
                 on_partitions_lost: RebalanceCallback | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.subscriptions = subscriptions
        self.host = host
        self.client = GroupClient(cluster, config.group_id, request_timeout_ms=config.request_timeout_ms,
                                  retry_backoff_ms=config.retry_backoff_ms)
        self.on_partitions_revoked = on_partitions_revoked
        self.on_partitions_assigned = on_partitions_assigned
        self.on_partitions_lost = on_partitions_lost
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id = ""
        self.state = MemberState.UNJOINED  # changed only by _apply, per the member_state table
        self._heartbeats_on = False  # the table's START_HEARTBEATS / STOP_HEARTBEATS
        self.fatal: BaseException | None = None
        self._rejoin_reason: str | None = None
        self._wakeup = asyncio.Event()
        self._next_metadata_check = 0.0
        self._group_topics: frozenset[str] = frozenset()  # leader: every member's topics
        self._snapshot: dict[str, int] | None = None  # leader: the partition counts it assigned from
        self._commit_lock = asyncio.Lock()
        self._last_committed: dict[TopicPartition, int] = {}
        self._pending_commits: set[asyncio.Task[None]] = set()
        # max.poll.interval.ms (rebalance_timeout_ms): when the application last read
        self.poll_expired = False  # left the group for not reading; joins again at the next read
        self._reads_seen = -1
        self._last_read_at = time.monotonic()

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    @property
    def in_group(self) -> bool:
        """Subscribed: partitions come from the group (else the application assigns them)."""
        return self.subscriptions.subscribed

    @property
    def topics(self) -> frozenset[str]:
        """The subscription evaluated: the names given, and the topics the patterns match."""
        return self.subscriptions.subscribed_topics

    # ------------------------------------------------------------------ the state table

    def _apply(self, event: MemberEvent, why: str = "") -> Transition:
        """Move along the member_state table and carry out the transition's effects (all but
        LEAVE_GROUP, which needs a request: the caller sends it)."""
        t = transition(self.state, event)
        if t.state is not self.state:
            log.debug("group %s: %s -> %s on %s", self.config.group_id, self.state.name, t.state.name, event.name)
        self.state = t.state
        effects = t.effects
        if not effects:
            return t
        if Effect.RESET_MEMBER_ID in effects:
            self.member_id = ""
        if Effect.RESET_GENERATION in effects:
            self.generation = -1
        if Effect.LOSE_PARTITIONS in effects:
            self.subscriptions.pause(self.subscriptions.assigned())  # hand out no more: not this member's now
        if Effect.STOP_HEARTBEATS in effects:
            self._heartbeats_on = False
        if Effect.START_HEARTBEATS in effects:
            self._heartbeats_on = True
        if Effect.REQUEST_REJOIN in effects:
            self.request_rejoin(why or event.value)
        if Effect.FAIL in effects and self.fatal is not None:
            self.host.fail(self.fatal)
        return t

    # ------------------------------------------------------------------ subscription

    def subscription_changed(self) -> None:
        """subscribe() changed the SubscriptionState's subscription: evaluate it, join again."""
        self.subscriptions.match_topics(t for t, info in self.cluster.topics.items() if not info.internal)
        self._next_metadata_check = 0.0  # evaluate patterns now
        self.request_rejoin("the subscription changed")

    def request_rejoin(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason
        self._wakeup.set()

    # ------------------------------------------------------------------ the task

    async def run(self) -> None:
        """The join loop, with the heartbeat and auto-commit tasks as children."""
        try:
            async with asyncio.TaskGroup() as tg:
                if self.config.enable_auto_commit:
                    tg.create_task(self._auto_commit_loop(), name=f"pulllog-autocommit-{self.config.group_id}")
                tg.create_task(self._heartbeat_loop(), name=f"pulllog-heartbeat-{self.config.group_id}")
                await self._join_loop()
        except* _Fatal:
            pass  # already handed to the application
        except* Exception as group:
            for exc in group.exceptions:
                log.error("group %s: the consumer's membership task failed", self.config.group_id, exc_info=exc)
            self._fail(group.exceptions[0])

    def _fail(self, error: BaseException) -> None:
        """A bug in the membership task: raise it to the application from now on."""
        if self.fatal is None:
            self.fatal = error
            self.host.fail(error)

    def _fatal(self, code: ErrorCode, where: str) -> _Fatal:
        cfg = self.config
        group = f"group {cfg.group_id!r}"
        if code == ErrorCode.fenced_instance_id:
            error: KafkaError = FencedInstanceIdError(code, (
                f"another consumer joined {group} with group_instance_id={cfg.group_instance_id!r} and fenced "
                "this one: give every consumer its own group_instance_id, and close this one"))
        elif code == ErrorCode.inconsistent_group_protocol:
            error = KafkaError(code, (
                f"{group} uses partition assignment strategies this consumer does not offer (it offers "
                f"{', '.join(s.name for s in cfg.assignors)}); give all members a common partition_assignment_strategy"))
        elif code == ErrorCode.invalid_session_timeout:
            error = KafkaError(code, (
                f"session_timeout_ms={cfg.session_timeout_ms} is outside what the broker allows "
                "(group.min.session.timeout.ms..group.max.session.timeout.ms, 6000..1800000 by default)"))
        elif code == ErrorCode.group_max_size_reached:
            error = KafkaError(code, f"{group} is full (the broker's group.max.size); add no more members")
        else:
            error = error_for(code, f"{where} for {group} failed: {_name(code)}")
        log.error("group %s: %s", cfg.group_id, error)
        self.fatal = self.fatal or error  # before the transition: its FAIL effect hands this error out
        self._apply(MemberEvent.FENCED_INSTANCE_ID if code == ErrorCode.fenced_instance_id
                    else MemberEvent.FATAL_ERROR)
        return _Fatal(error)

    async def _join_loop(self) -> None:
        while True:
            if isinstance(self.fatal, KafkaError):
                raise _Fatal(self.fatal)  # e.g. fenced while committing
            self._wakeup.clear()
            timeout: float | None = None
            if self.in_group:
                now = time.monotonic()
                if now >= self._next_metadata_check:
                    self._next_metadata_check = now + self.config.metadata_max_age_ms / 1000
                    await self._check_metadata()
                if not self.poll_expired:  # else out of the group until the application reads again
                    if self._rejoin_reason is not None or self.state is not MemberState.STABLE:
                        await self._rebalance()
                        continue
                    timeout = max(self._next_metadata_check - time.monotonic(), 0.0)
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ metadata

    async def _check_metadata(self) -> None:
        """Re-evaluate patterns; as leader, rejoin when a group topic's partition count changed."""
        spec = self.subscriptions.subscription
        try:
            if spec is not None and spec.patterns:
                await self.cluster.refresh(None)
                before = self.topics
                if self.subscriptions.match_topics(t for t, info in self.cluster.topics.items() if not info.internal):
                    topics = self.topics
                    added, removed = sorted(topics - before), sorted(before - topics)
                    self.request_rejoin(f"the topics matching the subscription changed (+{added} -{removed})")
            if self.is_leader and self._snapshot is not None and self.state is MemberState.STABLE:
                counts = await self._partition_counts(self._group_topics)
                if counts != self._snapshot:
                    self.request_rejoin(f"partition counts changed: {self._snapshot} -> {counts}")
        except (KafkaError, ConnectionError, TimeoutError) as exc:
            log.debug("group %s: metadata check failed (%s); retried later", self.config.group_id, exc)
            self._next_metadata_check = time.monotonic() + self.config.retry_backoff_ms / 1000

    async def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        wanted = sorted(topics)
        if wanted:
            await self.cluster.refresh(wanted)
        return {t: len(self.cluster.topics[t].partitions) for t in wanted if t in self.cluster.topics}

    # ------------------------------------------------------------------ rebalance

    async def _rebalance(self) -> None:
        """One attempt to join and sync; on failure the loop comes back here (after a backoff)."""
        cfg = self.config
        reason = self._rejoin_reason or "joining"
        backoff = cfg.retry_backoff_ms / 1000
        try:
            await self._prepare_join()
            self._rejoin_reason = None  # a reason raised from now on means another join
            self._apply(MemberEvent.JOIN_SENT)
            resp = await self.client.join(self.member_id, cfg.group_instance_id, cfg.session_timeout_ms,
                                          cfg.rebalance_timeout_ms, self._protocols(), reason)
            if self.state is not MemberState.PREPARING_REBALANCE:
                return  # the member moved on while JoinGroup was held (its generation ended, a poll timeout)
            code = resp.error_code
            if code == ErrorCode.member_id_required:  # KIP-394: join again at once with this id
                self.member_id = resp.member_id
                self._apply(MemberEvent.MEMBER_ID_REQUIRED, reason)
                return
            if code != ErrorCode.none:
                self._join_error(code, "JoinGroup")
                if code != ErrorCode.rebalance_in_progress:
                    await asyncio.sleep(backoff)
                return
            self.member_id, self.generation = resp.member_id, int(resp.generation_id)
            self.protocol, self.leader_id = resp.protocol_name, resp.leader
            self._apply(MemberEvent.JOINED)  # heartbeats keep the session alive while the leader assigns
            assignments: dict[str, bytes] = {}
            if self.is_leader and not getattr(resp, "skip_assignment", False):
                assignments = await self._assign(resp.protocol_name or "", resp.members)
            generation = self.generation
            sync = await self.client.sync(self.generation, self.member_id, cfg.group_instance_id,
                                          resp.protocol_name or "", assignments, cfg.rebalance_timeout_ms)
            if self.state is not MemberState.COMPLETING_REBALANCE or self.generation != generation:
                return  # a heartbeat learned meanwhile that this member is out of the group: join again
            if sync.error_code != ErrorCode.none:
                self._join_error(sync.error_code, "SyncGroup")
                if sync.error_code != ErrorCode.rebalance_in_progress:
                    await asyncio.sleep(backoff)
                return
            try:
                assignment = decode_assignment(bytes(sync.assignment))
            except ValueError as exc:
                log.error("group %s: the leader sent an assignment this consumer cannot read (%s); "
                          "consuming nothing until the next rebalance", cfg.group_id, exc)
                assignment = Assignment()
            self._apply(MemberEvent.SYNCED)
            await self._on_assignment(assignment)
        except (KafkaError, ConnectionError, TimeoutError) as exc:
            # The coordinator went away (CoordinatorUnavailableError), or metadata failed.
            if isinstance(exc, KafkaError) and not exc.retriable:
                raise
            if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                self._apply(MemberEvent.JOIN_FAILED, reason)
            else:
                self.request_rejoin(reason)
            log.info("group %s: %s; retrying", cfg.group_id, exc)
            await asyncio.sleep(backoff)

    def _protocols(self) -> list[tuple[str, bytes]]:
        """One subscription per assignor. Owned partitions and the generation go only to
        cooperative assignors: eager members own nothing when they join, and keeping the
        bytes the same from join to join lets a restarted static member rejoin unnoticed."""
        topics = tuple(sorted(self.topics))
        owned = tuple(sorted((tp.topic, tp.partition) for tp in self.subscriptions.assigned()))
        out = []
        for spec in self.config.assignors:
            if spec.cooperative:
                sub = Subscription(topics, owned, self.generation if owned else -1)
            else:
                sub = Subscription(topics)
            out.append((spec.name, encode_subscription(sub)))
        return out

    async def _assign(self, protocol: str, members: Sequence[Any]) -> dict[str, bytes]:
        """The leader's part: run the group's assignor over every member's subscription."""
        spec = next((s for s in self.config.assignors if s.name == protocol), None)
        if spec is None:  # the coordinator chose a protocol we did not offer: a broker bug
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"the coordinator chose protocol {protocol!r}, which this consumer did not offer")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m.member_id] = decode_subscription(bytes(m.metadata))
            except ValueError as exc:
                log.warning("group %s: member %s sent a subscription this leader cannot read (%s); "
                            "it gets no partitions", self.config.group_id, m.member_id, exc)
                subscriptions[m.member_id] = Subscription(())
        group_topics = frozenset(t for s in subscriptions.values() for t in s.topics)
        counts = await self._partition_counts(group_topics)
        result = spec.assign(subscriptions, counts)
        self._group_topics, self._snapshot = group_topics, counts
        log.info("group %s: leader of generation %d assigns %d partitions of %s to %d members (%s)",
                 self.config.group_id, self.generation, sum(counts.values()), sorted(counts), len(subscriptions),
                 protocol)
        return {member: encode_assignment(Assignment(tuple(result.get(member, ()))))
                for member in subscriptions}

    async def _prepare_join(self) -> None:
        owned = self.subscriptions.assigned()
        if not owned:
            return
        if self.generation < 0 or not self.member_id:
            await self._lose(owned)
        elif not self.config.cooperative:
            await self._revoke(owned)
        else:
            gone = {tp for tp in owned if tp.topic not in self.topics}
            if gone:
                await self._revoke(gone)

    async def _on_assignment(self, assignment: Assignment) -> None:
        new = {TopicPartition(t, p) for t, p in assignment.partitions}
        owned = self.subscriptions.assigned()
        if self.config.cooperative:
            revoked, added = owned - new, new - owned
            if revoked:
                await self._revoke(revoked)
                self.request_rejoin(f"revoked {len(revoked)} partitions for their new owners")
        else:
            if owned - new:  # eager members revoked everything before joining; this is a safety net
                await self._revoke(owned - new)
            added = new - owned
        log.info("group %s: generation %d, member %s owns %d partitions%s", self.config.group_id,
                 self.generation, self.member_id, len(new), " (leader)" if self.is_leader else "")
        self.subscriptions.assign_from_group(added)
        await self._callback(self.on_partitions_assigned, added if self.config.cooperative else new)

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Give partitions up in order: pause, let the application finish its batch, commit
        what it processed, tell it, drop them."""
        self.subscriptions.pause(partitions)
        # Also without auto-commit: an application committing in on_partitions_revoked commits
        # its positions, which must not cover a batch it is still working on.
        if not await self.host.wait_processed(partitions, self.config.rebalance_timeout_ms / 1000):
            log.warning("group %s: the application did not come back for more records within "
                        "rebalance_timeout_ms=%d; revoking while it still holds a batch (its records are "
                        "not committed, and will be read again by the next owner)",
                        self.config.group_id, self.config.rebalance_timeout_ms)
        if self.config.enable_auto_commit:
            try:
                await self.commit(self._changed(self.subscriptions.processed(partitions)))
            except (KafkaError, ConnectionError, TimeoutError) as exc:
                log.warning("group %s: commit on revoke failed (%s); the next owner starts from the last commit "
                            "(duplicates, no gap)", self.config.group_id, exc)
        await self._callback(self.on_partitions_revoked, partitions)
        self.subscriptions.remove(partitions)
        for tp in partitions:
            self._last_committed.pop(tp, None)

    async def _lose(self, partitions: set[TopicPartition]) -> None:
        log.warning("group %s: lost %d partitions (this member's generation ended); they are not committed",
                    self.config.group_id, len(partitions))
        self.subscriptions.pause(partitions)
        await self._callback(self.on_partitions_lost or self.on_partitions_revoked, partitions)
        self.subscriptions.remove(partitions)
        for tp in partitions:
            self._last_committed.pop(tp, None)

    async def _callback(self, callback: RebalanceCallback | None, partitions: set[TopicPartition]) -> None:
        if callback is None:
            return
        try:
            result = callback(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("group %s: rebalance callback %s failed", self.config.group_id,
                          getattr(callback, "__qualname__", callback))

    def _event_for(self, code: ErrorCode, where: str) -> MemberEvent:
        """The state-table event for an error answer; fatal ones are handed to the application
        and end the membership task (raises _Fatal)."""
        event = _EVENTS.get(code, MemberEvent.FATAL_ERROR)
        if event in (MemberEvent.FENCED_INSTANCE_ID, MemberEvent.FATAL_ERROR):
            raise self._fatal(code, where)
        log.info("group %s: %s answered %s (%s)", self.config.group_id, where, _name(code), event.value)
        return event

    def _on_error(self, code: ErrorCode, where: str) -> None:
        """An error answer to a Heartbeat or an OffsetCommit."""
        self._apply(self._event_for(code, where), f"{where}: {_name(code)}")

    def _join_error(self, code: ErrorCode, where: str) -> None:
        """An error answer to the JoinGroup or SyncGroup in flight: join again (as a new
        generation, or a new member, if the error says so)."""
        event = self._event_for(code, where)
        self._apply(event if event in _GENERATION_ENDING else MemberEvent.JOIN_FAILED, f"{where}: {_name(code)}")

    # ------------------------------------------------------------------ heartbeat

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self._poll_interval_expired():
                await self._leave_for_not_reading()
                continue
            if not self._heartbeats_on or self.generation < 0:
                continue
            generation, member_id = self.generation, self.member_id
            try:
                code = await self.client.heartbeat(generation, member_id, self.config.group_instance_id)
            except (KafkaError, ConnectionError) as exc:
                log.info("group %s: %s", self.config.group_id, exc)
                continue
            if code == ErrorCode.none or code in COORDINATOR_MOVED:
                continue
            if generation != self.generation or member_id != self.member_id or not self._heartbeats_on:
                continue  # the answer is about a generation this member has left behind
            self._on_error(code, "Heartbeat")

    def _poll_interval_expired(self) -> bool:
        """Kafka's poll timer: has a member of the group gone rebalance_timeout_ms (Kafka's
        max.poll.interval.ms) without the application reading or waiting for records?"""
        reads, waiting = self.host.poll_activity()
        now = time.monotonic()
        if waiting or reads != self._reads_seen or self.poll_expired:
            self._reads_seen, self._last_read_at = reads, now
            return False
        if not self.in_group or self.generation < 0 or self.state not in IN_GROUP:
            return False
        return now - self._last_read_at > self.config.rebalance_timeout_ms / 1000

    async def _leave_for_not_reading(self) -> None:
        """A stalled application must not keep partitions that others could read: leave the
        group (a dynamic member says so with LeaveGroup; a static one is dropped after its
        session timeout, as in Kafka), and join again at the next read, where the partitions
        held are reported lost, as they may have moved on meanwhile."""
        cfg = self.config
        log.warning("group %s: the application did not ask for records (getmany, getone, async for) within "
                    "rebalance_timeout_ms=%d (Kafka's max.poll.interval.ms); leaving the group so its partitions "
                    "move to members that read, and joining again at the next read. Handle records faster, take "
                    "fewer per call (max_poll_records), or raise rebalance_timeout_ms",
                    cfg.group_id, cfg.rebalance_timeout_ms)
        self.poll_expired = True
        member_id = self.member_id
        effects = self._apply(MemberEvent.POLL_TIMEOUT).effects
        if Effect.LEAVE_GROUP not in effects or cfg.group_instance_id is not None or not member_id:
            return
        self.member_id = ""
        try:
            code = await self.client.leave(member_id, "consumer poll timeout has expired")
            if code != ErrorCode.none:
                log.info("group %s: LeaveGroup answered %s", cfg.group_id, _name(code))
        except (KafkaError, ConnectionError, TimeoutError) as exc:
            log.info("group %s: LeaveGroup failed (%s); the group notices after the session timeout",
                     cfg.group_id, exc)

    def resume_after_poll_timeout(self) -> None:
        """The application reads again after ``_leave_for_not_reading``: join the group again."""
        self.poll_expired = False
        self._last_read_at = time.monotonic()
        if self.state in IN_GROUP:
            self._apply(MemberEvent.POLL_RESUMED, "the application reads again after its poll timeout")

    # ------------------------------------------------------------------ offsets

    def _changed(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(o) for tp, o in offsets.items() if self._last_committed.get(tp) != o}

    async def _auto_commit_loop(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self.in_group and (self.state is not MemberState.STABLE or self.generation < 0):
                continue  # a revoke commits by itself
            subscriptions = self.subscriptions
            offsets = self._changed(subscriptions.processed(subscriptions.assigned()))
            if not offsets:
                continue
            try:
                await self.commit(offsets)
            except (KafkaError, ConnectionError, TimeoutError) as exc:
                log.warning("group %s: auto-commit failed: %s", self.config.group_id, exc)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit, retried on retriable errors until request_timeout_ms; commits are
        sent one at a time, in the order they were asked for."""
        if not offsets:
            return
        if self.fatal is not None:
            raise self.fatal
        cfg = self.config
        async with self._commit_lock:
            deadline = time.monotonic() + cfg.request_timeout_ms / 1000
            pending = dict(offsets)
            while pending:
                if self.in_group:
                    # LEAVING: the revoke on close / unsubscribe commits what was processed.
                    if self.state not in (MemberState.STABLE, MemberState.LEAVING) or self.generation < 0:
                        raise CommitFailedError(ErrorCode.rebalance_in_progress, (
                            f"cannot commit for group {cfg.group_id!r}: this consumer is rebalancing (it is not in "
                            "a stable generation), so its partitions may move; the next owner re-reads from the last "
                            "commit. Commit in on_partitions_revoked to keep duplicates down"))
                    generation, member_id = self.generation, self.member_id
                else:
                    generation, member_id = -1, ""
                last: str
                try:
                    answers = await self.client.commit_offsets(
                        generation, member_id, cfg.group_instance_id if self.in_group else None,
                        {tp: (o.offset, o.metadata) for tp, o in pending.items()})
                except CoordinatorUnavailableError as exc:
                    answers, last = {}, str(exc)
                else:
                    last = ""
                    for tp, code in answers.items():
                        if code == ErrorCode.none:
                            self._last_committed[tp] = pending.pop(tp).offset
                    failed = {code for code in answers.values() if code != ErrorCode.none}
                    for code in failed:
                        self._commit_error(code, generation, pending)
                    if failed:
                        last = ", ".join(_name(c) for c in failed)
                if pending:
                    if time.monotonic() + cfg.retry_backoff_ms / 1000 > deadline:
                        raise KafkaError(ErrorCode.request_timed_out, (
                            f"committing offsets for group {cfg.group_id!r} did not succeed within "
                            f"request_timeout_ms={cfg.request_timeout_ms} (last error: {last})"))
                    await asyncio.sleep(cfg.retry_backoff_ms / 1000)

    def _commit_error(self, code: ErrorCode, generation: int, pending: Mapping[TopicPartition, Any]) -> None:
        """Raise for an OffsetCommit error that retrying cannot fix."""
        cfg = self.config
        what = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id) \
                and self.in_group:
            if generation == self.generation:
                self._on_error(code, "OffsetCommit")
            raise CommitFailedError(code, (
                f"cannot commit {what} for group {cfg.group_id!r}: {_name(code)}: the group rebalanced since these "
                "records were read and the partitions may belong to another member now, which re-reads them from "
                "the last commit. Commit in on_partitions_revoked, or more often, to keep duplicates down"))
        if code == ErrorCode.unknown_member_id:
            raise CommitFailedError(code, (
                f"cannot commit for group {cfg.group_id!r}: the group has active members, and a consumer that "
                "assign()s its own partitions may only commit into a group without members; use another group_id"))
        if code == ErrorCode.fenced_instance_id:
            raise self._fatal(code, "OffsetCommit").error
        if code == ErrorCode.offset_metadata_too_large:
            raise KafkaError(code, f"the metadata committed with {what} is too long (the broker's limit is 4096 bytes)")
        if code in COORDINATOR_MOVED or code in (ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out):
            return  # retried
        raise error_for(code, f"committing {what} for group {cfg.group_id!r} failed: {_name(code)}")

    def commit_nowait(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> asyncio.Future[None]:
        """Commit in a task the consumer owns (``close()`` waits for it, then cancels it). A
        failure is logged; awaiting the returned future raises it."""
        result: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = self.host.spawn(self._commit_in_background(offsets, result), f"pulllog-commit-{self.config.group_id}")
        self._pending_commits.add(task)
        task.add_done_callback(self._pending_commits.discard)
        result.add_done_callback(functools.partial(_cancel_with, task))
        return result

    async def _commit_in_background(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                    result: asyncio.Future[None]) -> None:
        # Never raises: an error ending a task would end its task group, the whole consumer.
        try:
            await self.commit(offsets)
        except asyncio.CancelledError:
            result.cancel()
            raise
        except Exception as exc:
            log.warning("group %s: commit failed: %s", self.config.group_id, exc)
            if not result.done():
                result.set_exception(exc)
        else:
            if not result.done():
                result.set_result(None)

    async def fetch_committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of these partitions (absent: nothing committed).
        Retriable errors are retried until request_timeout_ms."""
        cfg = self.config
        deadline = time.monotonic() + cfg.request_timeout_ms / 1000
        while True:
            try:
                answers = await self.client.fetch_offsets(partitions)
            except CoordinatorUnavailableError as exc:
                last = str(exc)
            else:
                errors = {code for code, _o, _m in answers.values() if code != ErrorCode.none}
                if not errors:
                    return {tp: offset for tp, (_c, offset, _m) in answers.items() if offset >= 0}
                retriable = COORDINATOR_MOVED | {ErrorCode.coordinator_load_in_progress, ErrorCode.unstable_offset_commit,
                                                 ErrorCode.request_timed_out}
                fatal = errors - retriable
                if fatal:
                    code = next(iter(fatal))
                    raise error_for(code, f"fetching committed offsets of group {cfg.group_id!r} failed: {_name(code)}")
                last = ", ".join(_name(c) for c in errors)
            if time.monotonic() + cfg.retry_backoff_ms / 1000 > deadline:
                raise KafkaError(ErrorCode.request_timed_out, (
                    f"fetching committed offsets of group {cfg.group_id!r} did not succeed within "
                    f"request_timeout_ms={cfg.request_timeout_ms} (last error: {last})"))
            await asyncio.sleep(cfg.retry_backoff_ms / 1000)

    # ------------------------------------------------------------------ leaving

    async def leave(self, reason: str) -> None:
        """After ``run`` was cancelled: commit what was processed, revoke (or lose) every
        partition, and send LeaveGroup unless this is a static member. Errors are logged."""
        cfg = self.config
        if self._pending_commits:
            await asyncio.wait(list(self._pending_commits), timeout=cfg.request_timeout_ms / 1000)
        owned = self.subscriptions.assigned()
        if self.fatal is not None or self.state not in IN_GROUP:
            return  # failed (the application has the error) or closed: nothing to give up, nobody to tell
        stable = self.state is MemberState.STABLE
        self._apply(MemberEvent.LEAVE)
        if not self.in_group:
            if cfg.enable_auto_commit and owned:
                try:
                    await self.commit(self._changed(self.subscriptions.processed(owned)))
                except (KafkaError, ConnectionError, TimeoutError) as exc:
                    log.warning("group %s: commit on close failed: %s", cfg.group_id, exc)
        elif owned:
            if self.generation >= 0 and self.member_id and stable:
                await self._revoke(owned)
            else:
                await self._lose(owned)
        if self.in_group and self.member_id and cfg.group_instance_id is None and self.fatal is None:
            try:
                code = await self.client.leave(self.member_id, reason)
                if code != ErrorCode.none:
                    log.info("group %s: LeaveGroup answered %s", cfg.group_id, _name(code))
            except (KafkaError, ConnectionError, TimeoutError) as exc:
                log.info("group %s: LeaveGroup failed (%s); the group notices after the session timeout",
                         cfg.group_id, exc)
        self.member_id = "" if cfg.group_instance_id is None else self.member_id
        self._snapshot = None
        if self.state is MemberState.LEAVING:  # else FAILED: a commit on the way out was fenced
            self._apply(MemberEvent.LEFT)

    async def close(self) -> None:
        self._apply(MemberEvent.CLOSE)
        for task in list(self._pending_commits):
            task.cancel()
        await self.client.close()


def _cancel_with(task: asyncio.Task[None], result: asyncio.Future[None]) -> None:
    """The application cancelled the future commit_nowait() returned: cancel the commit. A
    failure it never awaits counts as seen (it was logged)."""
    if result.cancelled():
        task.cancel()
    else:
        result.exception()


class _Fatal(Exception):
    """Ends the membership task after a fatal error was handed to the application."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error
