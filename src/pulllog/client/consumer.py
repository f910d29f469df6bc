"""pulllog's asyncio Consumer: the paper's stream of messages that never ends.

    async with Consumer("127.0.0.1:9092", group_id="billing", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["events"])     # or a pattern: "^events-.*", re.compile(...)
        async for record in consumer:      # waits for new records instead of ending
            handle(record.offset, record.key, record.value)

With :meth:`~Consumer.subscribe` the consumer is a member of the consumer group
``group_id``: the group splits the topics' partitions among its members, moves them when
members come and go, and keeps each partition's committed offset, where its next owner
starts. Delivery is at least once: duplicates are possible after a crash, a gap never
(:mod:`pulllog.client.membership` explains both, with the rebalance protocol). Offsets are
committed every ``auto_commit_interval_ms`` and on every revoke, or by :meth:`~Consumer.commit`
/ :meth:`~Consumer.commit_nowait`; :meth:`~Consumer.committed` reads them back.

Or the application chooses partitions itself with :meth:`Consumer.assign`; with a
``group_id`` they start at the group's committed offsets and commits go to that group. Either
way it moves through them with :meth:`~Consumer.seek`, :meth:`~Consumer.seek_to_beginning`,
:meth:`~Consumer.seek_to_end` and :meth:`~Consumer.offsets_for_times`. Records come from
``async for``, :meth:`~Consumer.getone` or :meth:`~Consumer.getmany`.

Behind them a fetcher task (:mod:`pulllog.client.fetcher`) keeps the next Fetch in flight
while the application handles the records of the previous one, and records are decoded a
batch at a time as the application reaches them (:mod:`pulllog.client.completed_fetch`).
The subscription, the assignment and every partition's position live in one
:class:`~pulllog.client.subscription_state.SubscriptionState`, shared by the consumer, the
fetcher and the group membership.

Tasks: ``start()`` creates one supervisor task, which owns an ``asyncio.TaskGroup`` holding
the fetcher, the group membership (:mod:`pulllog.client.membership`) and background commits;
``close()`` cancels it and joins them all. No task the consumer starts outlives it.

Errors come to the application when it reads the partition they belong to:
:class:`OffsetOutOfRangeError` / :class:`NoOffsetForPartitionError` with
``auto_offset_reset="none"`` (both name the valid range), :class:`CorruptRecordError` when
``check_crcs`` finds a damaged batch. They stay until the application seeks the partition.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from .connection import BrokerUnreachableError
from .cluster import DEFAULT_BOOTSTRAP, Cluster
from .completed_fetch import CorruptRecordError
from .errors import KafkaError, UnknownTopicError
from .fetcher import (
    EARLIEST,
    LATEST,
    FetchConfig,
    Fetcher,
    InvalidOffsetError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from .membership import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupConfig,
    GroupMembership,
    OffsetAndMetadata,
    RebalanceCallback,
    SubscriptionSpec,
    resolve_assignors,
)
from .subscription_state import PartitionState, SubscriptionState
from .task_scope import TaskScope, cancel_and_join
from .types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition

__all__ = [
    "BrokerUnreachableError",
    "CommitFailedError",
    "Consumer",
    "ConsumerClosedError",
    "CorruptRecordError",
    "FencedInstanceIdError",
    "InvalidOffsetError",
    "KafkaError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "UnknownTopicError",
]

_RESETS = ("earliest", "latest", "none")
_ISOLATION = ("read_uncommitted", "read_committed")


class ConsumerClosedError(RuntimeError):
    """The consumer was closed (or never started) and cannot read."""


class OffsetAndTimestamp(NamedTuple):
    """The first offset whose record's timestamp is at or after the one asked for."""

    offset: int
    timestamp: int


class Consumer:
    """An asyncio consumer of assigned partitions; see the module docstring.

    The fetch settings go to the broker with every Fetch: ``fetch_min_bytes`` and
    ``fetch_max_wait_ms`` make it a long poll (answer once this many bytes are there, or
    after this long), ``fetch_max_bytes`` caps a response and ``max_partition_fetch_bytes``
    each partition's share (the first partition with data always gets a whole batch, so
    a batch larger than the caps is still read). ``auto_offset_reset`` decides where a
    partition without a valid position starts: "earliest", "latest", or "none" (raise).
    ``max_poll_records`` caps what one ``getmany()`` returns unless it is given
    ``max_records``: handing out a few hundred records at a time, while they are still in
    the CPU cache, is markedly faster than a whole response's thousands at once.

    The group settings keep Kafka's names and defaults. ``session_timeout_ms``: a member
    that sends no heartbeat for this long is removed and its partitions move (the broker
    allows 6000 and up); ``heartbeat_interval_ms``: how often the background heartbeat
    goes; ``rebalance_timeout_ms`` (Kafka's max.poll.interval.ms): how long the group waits
    for members to rejoin, how long a revoke waits for the application to finish the
    batch in its hands, and the longest the application may go without asking for records
    (``getmany``, ``getone``, ``async for``): past it the consumer leaves the group, so the
    partitions move to members that are reading, and it joins again at the next read.
    ``partition_assignment_strategy``: names ("range", "roundrobin",
    "cooperative-sticky") or assignor functions (see
    :func:`~pulllog.client.membership.resolve_assignors`), in order of preference.
    ``group_instance_id`` makes the consumer a static member. The rebalance callbacks get
    a set of TopicPartitions and may be plain functions or coroutine functions; they run
    before (revoked, lost) or after (assigned) the assignment changes.
    """

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "pulllog-consumer",
        group_id: str | None = None,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        auto_offset_reset: str = "latest",
        isolation_level: str = "read_uncommitted",
        check_crcs: bool = True,
        request_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 300_000,
        retry_backoff_ms: int = 100,
        max_poll_records: int = 500,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 300_000,
        partition_assignment_strategy: str | Callable[..., Any] | Iterable[str | Callable[..., Any]] = ("range",),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        on_partitions_revoked: RebalanceCallback | None = None,
        on_partitions_assigned: RebalanceCallback | None = None,
        on_partitions_lost: RebalanceCallback | None = None,
    ) -> None:
        if auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset={auto_offset_reset!r}: use one of {', '.join(_RESETS)}")
        if isolation_level not in _ISOLATION:
            raise ValueError(f"isolation_level={isolation_level!r}: use one of {', '.join(_ISOLATION)}")
        for name, value in (("fetch_min_bytes", fetch_min_bytes), ("fetch_max_bytes", fetch_max_bytes),
                            ("max_partition_fetch_bytes", max_partition_fetch_bytes)):
            if value < 1:
                raise ValueError(f"{name}={value}: must be at least 1")
        if max_poll_records < 1:
            raise ValueError(f"max_poll_records={max_poll_records}: must be at least 1")
        if fetch_max_wait_ms < 0:
            raise ValueError(f"fetch_max_wait_ms={fetch_max_wait_ms}: must not be negative")
        if group_id is not None and not group_id:
            raise ValueError("group_id must not be empty (or None: no consumer group)")
        if heartbeat_interval_ms < 1 or heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms={heartbeat_interval_ms} must be positive and below "
                             f"session_timeout_ms={session_timeout_ms} (a third of it is usual)")
        if rebalance_timeout_ms < 1 or auto_commit_interval_ms < 1:
            raise ValueError("rebalance_timeout_ms and auto_commit_interval_ms must be positive")
        if group_instance_id is not None and not group_instance_id:
            raise ValueError("group_instance_id must not be empty (or None: a dynamic member)")
        self._bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.group_id = group_id
        self._request_timeout_ms = request_timeout_ms
        self._max_poll_records = max_poll_records
        self._metadata_max_age_ms = metadata_max_age_ms
        self._config = FetchConfig(
            min_bytes=fetch_min_bytes, max_wait_ms=fetch_max_wait_ms, max_bytes=fetch_max_bytes,
            max_partition_bytes=max_partition_fetch_bytes, auto_offset_reset=auto_offset_reset,
            read_committed=isolation_level == "read_committed", check_crcs=check_crcs,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self._subscriptions = SubscriptionState()  # subscription, assignment, positions: the one copy
        self._cluster: Cluster | None = None
        self._fetcher: Fetcher | None = None
        self._tasks: TaskScope | None = None  # the supervisor: owns every task the consumer starts
        self._returned = asyncio.Event()  # the application came back for more records
        self._polls = 0  # calls to getmany/getone/__anext__: the group checks they keep coming
        self._waiting = 0  # reads waiting for the fetcher right now (polling, too)
        self._closed = False
        self._group_config = None if group_id is None else GroupConfig(
            group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            assignors=resolve_assignors(partition_assignment_strategy), enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms, request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms)
        self._callbacks = {"on_partitions_revoked": on_partitions_revoked,
                           "on_partitions_assigned": on_partitions_assigned,
                           "on_partitions_lost": on_partitions_lost}
        self._membership: GroupMembership | None = None
        self._group_task: asyncio.Task[None] | None = None  # a child of the supervisor

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect to a bootstrap server and start the consumer's tasks."""
        if self._closed:
            raise ConsumerClosedError("this consumer was closed; create a new one")
        if self._tasks is not None:
            return
        cluster = Cluster(self._bootstrap_servers, client_id=self.client_id,
                          request_timeout_ms=self._request_timeout_ms,
                          metadata_max_age_ms=self._metadata_max_age_ms)
        try:
            await cluster.refresh([])  # brokers only: fail now, with the address, if none answers
        except BaseException:
            await cluster.close()
            raise
        self._cluster = cluster
        subscriptions = self._subscriptions
        if self._group_config is not None:
            self._membership = GroupMembership(cluster, self._group_config, subscriptions, _GroupHost(self),
                                               **self._callbacks)
            if subscriptions.subscribed:
                self._membership.subscription_changed()
        committed = self._membership.fetch_committed if self._membership is not None else None
        self._fetcher = fetcher = Fetcher(cluster, self._config, subscriptions, committed)
        subscriptions.add_listener(fetcher.wake)
        self._tasks = TaskScope("pulllog-consumer")
        await self._tasks.open()
        self._spawn(fetcher.run(), "pulllog-consumer-fetcher")
        if self._membership is not None:
            self._group_task = self._spawn(self._membership.run(), "pulllog-consumer-group")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` as a child of the consumer's supervisor; it must not raise (that would
        end the consumer's every task)."""
        if self._tasks is None or self._closed:
            work.close()
            raise ConsumerClosedError("the consumer is closed")
        return self._tasks.spawn(work, name)

    async def close(self) -> None:
        """Leave the group (commit what was processed, revoke, LeaveGroup unless static), stop
        fetching, cancel and join the consumer's tasks, close the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._fetcher is not None:
            self._fetcher.data_ready.set()  # readers waiting in getone() / async for see the close
            self._fetcher.positions_changed.set()
        try:
            if self._membership is not None:
                self._ack(None)  # closing: the application is done with what it read
                try:
                    cancelled = await _join_even_if_cancelled(self._group_task)
                    self._group_task = None
                    # Leave even when the caller is being cancelled (Ctrl-C under asyncio.run, a
                    # task group ending): as Kafka's clients do on close, so the group rebalances
                    # now, not a session timeout later. The cancellation goes on below.
                    await self._membership.leave("the consumer is closing")
                finally:
                    await self._membership.close()
                if cancelled:
                    raise asyncio.CancelledError
            if self._tasks is not None:
                await self._tasks.aclose()
        finally:
            if self._cluster is not None:
                await self._cluster.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _running(self) -> Fetcher:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._fetcher is None:
            raise ConsumerClosedError(
                "the consumer is not started: `await consumer.start()` or `async with Consumer(...)`")
        return self._fetcher

    # ------------------------------------------------------------------ the group

    def subscribe(self, topics: str | re.Pattern[str] | Iterable[str | re.Pattern[str]]) -> None:
        """Join the consumer group ``group_id`` and consume these topics: names, and regex
        patterns (``re.Pattern`` objects, or strings starting with ``^``) that every topic is
        matched against, now and whenever metadata is refreshed (``re.search``; internal
        topics never match). Replaces an earlier subscription. Returns at once: the group
        assigns partitions in the background (``on_partitions_assigned`` says when)."""
        if self._group_config is None:
            raise ValueError("subscribe() needs a group_id: Consumer(..., group_id='my-group'); "
                             "without one, assign() partitions yourself")
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        self._subscriptions.subscribe(SubscriptionSpec.parse(topics))
        if self._membership is not None:
            self._membership.subscription_changed()

    async def unsubscribe(self) -> None:
        """Leave the group: commit what was processed (with auto-commit), revoke every
        partition, send LeaveGroup (unless a static member). Then assign() may be used."""
        subscriptions = self._subscriptions
        if not subscriptions.subscribed:
            return
        membership = self._membership
        if membership is None or self._closed:
            subscriptions.unsubscribe()
            return
        self._ack(None)
        await cancel_and_join(self._group_task)
        self._group_task = None
        try:
            await membership.leave("the consumer unsubscribed")
        finally:
            subscriptions.unsubscribe()
            if not self._closed:
                self._group_task = self._spawn(membership.run(), "pulllog-consumer-group")

    def subscription(self) -> set[str]:
        """The topics subscribed to now: the names given, and the topics matching the patterns."""
        return set(self._subscriptions.subscribed_topics)

    @property
    def member_id(self) -> str:
        """This consumer's member id in its group ("" until it has joined)."""
        return self._membership.member_id if self._membership is not None else ""

    @property
    def generation(self) -> int:
        """The group generation this consumer's assignment belongs to (-1 when not in one)."""
        return self._membership.generation if self._membership is not None else -1

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group id, generation, member id and instance id, for
        ``producer.send_offsets_to_transaction(offsets, consumer.group_metadata())``."""
        if self._group_config is None:
            raise ValueError("group_metadata() needs a consumer with a group_id")
        return ConsumerGroupMetadata(self._group_config.group_id, self.generation, self.member_id,
                                     self._group_config.group_instance_id)

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit offsets for the group, and return once they are durable.

        ``offsets`` maps partitions to the offset of the *next* record to read (the record
        after the last one processed), optionally with metadata:
        ``{tp: OffsetAndMetadata(offset, "note")}``. Without it, the position of every
        assigned partition is committed: everything handed out counts as processed.
        Retriable errors are retried until ``request_timeout_ms``. Raises
        :class:`CommitFailedError` if the group rebalanced since (the partitions may belong
        to another member now, which re-reads from the last successful commit)."""
        membership = self._group_member("commit()")
        await membership.commit(self._offsets_to_commit(offsets))

    def commit_nowait(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
                      ) -> asyncio.Future[None]:
        """Like :meth:`commit`, but in the background (fire and forget). Commits go out in the
        order they were asked for; a failure is logged, and raised by awaiting the returned
        future (cancelling it cancels the commit). ``close()`` waits for pending commits."""
        membership = self._group_member("commit_nowait()")
        return membership.commit_nowait(self._offsets_to_commit(offsets))

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for ``tp`` (the next record to read), or None if the
        group has committed none."""
        membership = self._group_member("committed()")
        return (await membership.fetch_committed([tp])).get(tp)

    def _group_member(self, what: str) -> GroupMembership:
        if self._group_config is None:
            raise ValueError(f"{what} needs a group_id: offsets are committed per consumer group")
        if self._membership is None:
            raise ConsumerClosedError(
                "the consumer is not started: `await consumer.start()` or `async with Consumer(...)`")
        return self._membership

    def _offsets_to_commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                           ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            self._ack(None)
            return {tp: OffsetAndMetadata(offset) for tp, offset in self._subscriptions.positions().items()}
        out = {}
        for tp, value in offsets.items():
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"commit() takes {{TopicPartition: offset}}, not {tp!r}")
            entry = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            if not isinstance(entry.offset, int) or entry.offset < 0:
                raise ValueError(f"offset for {tp.topic}-{tp.partition} must be a non-negative int, not {entry.offset!r}")
            out[tp] = entry
        return out

    # ------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions. Ones already assigned keep their position; new ones
        start at the group's committed offset (with a ``group_id``), else per
        ``auto_offset_reset``."""
        self._subscriptions.assign_from_user(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assigned()

    def _state(self, tp: TopicPartition) -> PartitionState:
        return self._subscriptions.state(tp)

    # ------------------------------------------------------------------ positions

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on (records buffered for it are dropped)."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, not {offset!r}")
        self._move(self._state(tp), offset)

    def _move(self, state: PartitionState, offset: int | None) -> None:
        self._subscriptions.move(state, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the log start offset of these partitions (all assigned ones if none are given)."""
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the end (the high watermark) as it is now: only records produced later are read."""
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, which: int, partitions: tuple[TopicPartition, ...]) -> None:
        subscriptions = self._subscriptions
        states = [self._state(tp) for tp in partitions] if partitions else list(subscriptions.partitions.values())
        found = await self._running().list_offsets({s.tp: which for s in states})
        for state in states:
            if subscriptions.owns(state):
                self._move(state, found[state.tp][0])

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``tp`` yields; found per ``auto_offset_reset`` if unknown
        (with "none", raises NoOffsetForPartitionError)."""
        state = self._state(tp)
        fetcher = self._running()
        deadline = time.monotonic() + self._request_timeout_ms / 1000
        while state.position is None:
            if state.error is not None:
                raise state.error
            if fetcher.fatal is not None:
                raise fetcher.fatal
            if self._closed:
                raise ConsumerClosedError("the consumer is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaError(ErrorCode.request_timed_out, f"no position found for {tp.topic}-{tp.partition} within "
                                    f"request_timeout_ms={self._request_timeout_ms}; does the topic exist?")
            fetcher.positions_changed.clear()
            fetcher.wake()
            try:
                async with asyncio.timeout(remaining):
                    await fetcher.positions_changed.wait()
            except TimeoutError:
                pass
            state = self._state(tp)
        return state.position

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's high watermark as of the last Fetch response (None before one)."""
        return self._state(tp).highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self._state(tp).last_stable_offset

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition (assigned or not)."""
        found = await self._running().list_offsets({tp: EARLIEST for tp in partitions})
        return {tp: offset for tp, (offset, _ts) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end (high watermark: the offset the next record will get) of each partition."""
        found = await self._running().list_offsets({tp: LATEST for tp in partitions})
        return {tp: offset for tp, (offset, _ts) in found.items()}

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp (ms) is at or after the given
        one, with that record's timestamp; None if every record is older."""
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp.topic}-{tp.partition} must be ms since the epoch, not {ts!r}")
        found = await self._running().list_offsets(dict(timestamps))
        return {tp: (OffsetAndTimestamp(offset, ts) if offset >= 0 else None) for tp, (offset, ts) in found.items()}

    async def partitions_for_topic(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (raises UnknownTopicError if it does not exist)."""
        self._running()
        assert self._cluster is not None
        return set(await self._cluster.partitions_for(topic))

    # ------------------------------------------------------------------ reading

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record, waiting for one as long as it takes; ends only when the consumer closes."""
        self._polls += 1
        if self._subscriptions.held:
            self._ack(None)
        while True:
            if self._closed:
                raise StopAsyncIteration
            record = self._next_record(None)
            if record is not None:
                return record
            await self._wait_for_data(self._running(), None)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of these partitions, if given), waiting as long as it takes."""
        self._polls += 1
        only = frozenset(partitions) or None
        if self._subscriptions.held:
            self._ack(only)
        while True:
            record = self._next_record(only)
            if record is not None:
                return record
            await self._wait_for_data(self._running(), None)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records already fetched, by partition, at most ``max_records`` in all (default: the
        consumer's ``max_poll_records``). If none are buffered, waits up to ``timeout_ms`` for
        some; returns ``{}`` if none came."""
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records={max_records}: must be at least 1 (or None for max_poll_records)")
        self._polls += 1
        only = frozenset(partitions) or None
        if self._subscriptions.held:
            self._ack(only)
        limit = max_records if max_records is not None else self._max_poll_records
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            out = self._drain(only, limit)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._resume_group_if_idled_out()
                return out
            try:
                await self._wait_for_data(self._running(), remaining)
            except TimeoutError:
                return self._drain(only, limit)

    async def _wait_for_data(self, fetcher: Fetcher, timeout: float | None) -> None:
        """Wait until the fetcher has buffered more; meanwhile the application counts as
        polling (max.poll.interval.ms does not run out while it waits here)."""
        self._resume_group_if_idled_out()
        fetcher.data_ready.clear()
        self._waiting += 1
        try:
            async with asyncio.timeout(timeout):
                await fetcher.data_ready.wait()
        finally:
            self._waiting -= 1

    def _resume_group_if_idled_out(self) -> None:
        """The application polls again after the group membership left the group because it
        had not polled for rebalance_timeout_ms: join again (Kafka rejoins in the next poll)."""
        membership = self._membership
        if membership is not None and membership.poll_expired:
            membership.resume_after_poll_timeout()

    def _raise_errors(self, fetcher: Fetcher, only: frozenset[TopicPartition] | None) -> None:
        if fetcher.fatal is not None:
            raise fetcher.fatal
        for state in self._subscriptions.failed:
            if state.error is not None and (only is None or state.tp in only):
                raise state.error

    def _next_record(self, only: frozenset[TopicPartition] | None) -> ConsumerRecord | None:
        """One buffered record, or None; the iterator's hot path (one record per call)."""
        fetcher = self._fetcher
        if fetcher is None or self._closed:
            fetcher = self._running()  # raises the right error
        subscriptions = self._subscriptions
        if subscriptions.failed or fetcher.fatal is not None:
            self._raise_errors(fetcher, only)
        state = subscriptions.reading
        while True:
            if state is None or not state.chunks or state.paused or (only is not None and state.tp not in only):
                state = self._next_readable(only)
                if state is None:
                    return None
            record = state.chunks[0].next_record()
            if record is not None:
                state.position = record.offset + 1
                subscriptions.held.add(state)
                return record
            self._chunk_done(state, fetcher)
            state = None  # take turns: the next partition with data goes first

    def _drain(self, only: frozenset[TopicPartition] | None, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        fetcher = self._running()
        subscriptions = self._subscriptions
        if subscriptions.failed or fetcher.fatal is not None:
            self._raise_errors(fetcher, only)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        while limit > 0:
            state = self._next_readable(only, exclude=out)
            if state is None:
                break
            while limit > 0 and state.chunks:
                chunk = state.chunks[0]
                try:
                    records = chunk.take(limit)
                except CorruptRecordError:
                    if out:
                        return out
                    raise
                if records:
                    got = out.get(state.tp)
                    if got is None:
                        out[state.tp] = records
                    else:
                        got.extend(records)
                    limit -= len(records)
                    subscriptions.consumed(state, records[-1].offset + 1)
                if chunk.drained:
                    self._chunk_done(state, fetcher)
                elif not records:
                    break
        return out

    def _next_readable(self, only: frozenset[TopicPartition] | None,
                       exclude: Mapping[TopicPartition, Any] = {}) -> PartitionState | None:
        """A partition with buffered data, taking turns: the one after the last one read."""
        subscriptions = self._subscriptions
        states = list(subscriptions.partitions.values())
        if not states:
            return None
        start = 0
        if subscriptions.reading is not None:
            try:
                start = states.index(subscriptions.reading) + 1
            except ValueError:
                pass
        for i in range(len(states)):
            state = states[(start + i) % len(states)]
            if state.chunks and not state.paused and state.tp not in exclude and (only is None or state.tp in only):
                subscriptions.reading = state
                return state
        return None

    def _chunk_done(self, state: PartitionState, fetcher: Fetcher) -> None:
        chunk = state.chunks.popleft()
        if chunk.next_offset is not None and (state.position is None or state.position < chunk.next_offset):
            if state not in self._subscriptions.held:
                state.processed = chunk.next_offset  # nothing handed out: nothing left to process
            state.position = chunk.next_offset  # past trailing control batches and compacted gaps
        fetcher.wake()  # room for another prefetch

    def _ack(self, only: frozenset[TopicPartition] | None) -> None:
        """The application came back for more records (of ``only``, or all partitions): what
        it was handed before is processed."""
        self._subscriptions.ack(only)
        self._returned.set()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._tasks is not None else "not started"
        group = f", group {self._group_config.group_id!r}" if self._group_config is not None else ""
        return f"Consumer({state}{group}, {len(self._subscriptions)} partitions assigned)"


class _GroupHost:
    """The consumer's side of :class:`~pulllog.client.membership.PartitionHost`: what the group
    membership needs beyond the SubscriptionState they share."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def poll_activity(self) -> tuple[int, bool]:
        return self._consumer._polls, self._consumer._waiting > 0

    async def wait_processed(self, partitions: set[TopicPartition], timeout_s: float) -> bool:
        c = self._consumer
        deadline = time.monotonic() + timeout_s
        while True:
            if not c._subscriptions.holds_any(partitions):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or c._closed:
                return False
            c._returned.clear()
            try:
                async with asyncio.timeout(remaining):
                    await c._returned.wait()
            except TimeoutError:
                return False

    def fail(self, error: BaseException) -> None:
        fetcher = self._consumer._fetcher
        if fetcher is not None:
            fetcher.fail_all(error)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return self._consumer._spawn(work, name)


async def _join_even_if_cancelled(task: asyncio.Task[Any] | None) -> bool:
    """Cancel a task the consumer owns and wait until it has ended, even when the caller is
    being cancelled meanwhile; returns True if the caller's cancellation was caught here (the
    caller must raise it once it has finished closing)."""
    if task is None:
        return False
    task.cancel()
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    current = asyncio.current_task()
    return cancelled or bool(current is not None and current.cancelling())
