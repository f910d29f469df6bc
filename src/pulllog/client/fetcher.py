"""The consumer's fetcher: a task that keeps a Fetch in flight to every leader it reads from.

State: one :class:`~pulllog.client.subscription_state.PartitionState` per assigned
partition, owned by the consumer's :class:`~pulllog.client.subscription_state.SubscriptionState`
(the fetcher keeps no copy of the assignment or positions; it reads them there each time):

    position       the offset of the next record the application gets
    processed      the position when the application last came back for more records:
                   everything before it is processed (what auto-commit commits)
    fetch_offset   where the next Fetch starts: position plus what is buffered
    chunks         CompletedFetch objects not yet read to the end, oldest first
    epoch          bumped whenever the application moves the position (seek, assign):
                   a response to a Fetch sent before is dropped on arrival
    leader         the broker leading it, as last seen in the metadata; forgotten on
                   NOT_LEADER_OR_FOLLOWER and the like, and re-read when metadata is stale
    paused         being revoked from this consumer: neither fetched nor handed out

Rules:

- Prefetch: a partition is fetched while it has fewer than ``PREFETCH_CHUNKS`` (2) buffered
  chunks, so while the application reads one chunk the next Fetch is in flight, and once it
  arrives the fetcher waits for the application before asking for more (memory stays
  bounded by about two responses per partition).
- Each broker that leads a fetchable partition gets a fetch loop (a child task) with at
  most one Fetch in flight, carrying every fetchable partition that broker leads. The loop
  writes the next request in the same step that handled the previous response: the
  application's task reads buffered records without ever yielding to the event loop, so a
  request left to another task would wait until the application ran dry.
- Partition order rotates from request to request, because the broker gives only the first
  partition with data the right to exceed ``max_partition_fetch_bytes`` (KIP-74) and fills
  ``fetch_max_bytes`` in order; a partition cut short by either gets its turn first later.
- A partition without a position starts at the consumer group's committed offset (when
  the consumer has a ``group_id``); without one it is reset by ListOffsets per
  ``auto_offset_reset`` (earliest, latest); with "none" it gets a
  :class:`NoOffsetForPartitionError` naming the valid range instead. OFFSET_OUT_OF_RANGE
  from a Fetch resets per ``auto_offset_reset`` the same way.
- Retriable errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a lost connection,
  a timeout) mark the metadata stale and back the partition off for ``retry_backoff_ms``;
  other errors are parked on the partition and raised to the application when it reads.

The main task (:meth:`Fetcher.run`) starts resets and fetch loops and owns them (an
``asyncio.TaskGroup``): cancelling it cancels and joins every request in flight.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from .connection import BrokerUnreachableError, ConnectionClosedError, UnsupportedByBrokerError
from ..net.fetch import FETCH_REQUEST_MAX_VERSION, FETCH_REQUEST_MIN_VERSION, encode_fetch_request
from .cluster import Cluster
from .completed_fetch import CompletedFetch
from .errors import KafkaError, UnknownTopicError
from .subscription_state import PartitionState, SubscriptionState
from .types import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "FetchConfig",
    "Fetcher",
    "InvalidOffsetError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "PartitionState",
]

log = logging.getLogger("pulllog.client")

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
PREFETCH_CHUNKS = 2
_RESET_TIMESTAMPS = {"earliest": EARLIEST, "latest": LATEST}


class InvalidOffsetError(KafkaError):
    """The consumer has no valid position for a partition and may not pick one itself."""

    def __init__(self, tp: TopicPartition, message: str, log_start_offset: int | None,
                 high_watermark: int | None) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message)
        self.retriable = False
        self.topic_partition = tp
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class OffsetOutOfRangeError(InvalidOffsetError):
    """The position is outside the log and ``auto_offset_reset`` is "none"."""


class NoOffsetForPartitionError(InvalidOffsetError):
    """The partition has no position (nothing seeked, nothing committed) and
    ``auto_offset_reset`` is "none"."""


def _valid_range(log_start: int | None, high_watermark: int | None) -> str:
    if log_start is None or high_watermark is None:
        return "the valid range is unknown"
    if high_watermark <= log_start:
        return f"the partition is empty: the only valid offset is {log_start} (the end)"
    return f"valid offsets are {log_start}..{high_watermark - 1}, and {high_watermark} (the end) to wait for new ones"


@dataclass(frozen=True, slots=True)
class FetchConfig:
    min_bytes: int = 1
    max_wait_ms: int = 500
    max_bytes: int = 52_428_800
    max_partition_bytes: int = 1_048_576
    auto_offset_reset: str = "latest"
    read_committed: bool = False
    check_crcs: bool = True
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100


CommittedOffsets = Callable[[Sequence[TopicPartition]], Awaitable[dict[TopicPartition, int]]]


class Fetcher:
    def __init__(self, cluster: Cluster, config: FetchConfig, subscriptions: SubscriptionState,
                 committed: CommittedOffsets | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.subscriptions = subscriptions
        self.committed = committed  # the group's committed offsets, asked before a reset
        self.data_ready = asyncio.Event()  # set when a chunk or an error is added
        self.positions_changed = asyncio.Event()  # set when a reset found (or failed to find) positions
        self.fatal: BaseException | None = None  # a bug in the fetcher: raised to every reader
        self._wakeup = asyncio.Event()
        self._node_tasks: dict[int, asyncio.Task[None]] = {}
        self._rotation = 0

    def wake(self) -> None:
        self._wakeup.set()

    def fail(self, state: PartitionState, error: KafkaError) -> None:
        self.subscriptions.set_error(state, error)
        self.data_ready.set()

    # ------------------------------------------------------------------ the task

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    self._wakeup.clear()
                    delay = await self._launch(tg)
                    if delay is None:
                        await self._wakeup.wait()
                    else:
                        try:
                            async with asyncio.timeout(delay):
                                await self._wakeup.wait()
                        except TimeoutError:
                            pass
        except Exception as exc:  # a bug: surface it to the application rather than stall
            self._fatal(exc)

    def _fatal(self, exc: BaseException) -> None:
        log.error("the consumer's fetcher failed", exc_info=exc)
        self.fail_all(exc)

    def fail_all(self, exc: BaseException) -> None:
        """Raise ``exc`` to every reader from now on (a bug here, or a fatal group error)."""
        self.fatal = exc
        self.data_ready.set()
        self.positions_changed.set()

    def _fetchable(self, state: PartitionState, now: float) -> bool:
        return (not state.busy and state.error is None and not state.halted and state.retry_at <= now
                and state.position is not None and len(state.chunks) < PREFETCH_CHUNKS and not state.paused)

    async def _launch(self, tg: asyncio.TaskGroup) -> float | None:
        """Start resets, and a fetch loop for every broker that leads a fetchable partition
        and has none yet; return the seconds until a backed-off partition may go again."""
        now = time.monotonic()
        to_reset: list[PartitionState] = []
        nodes: set[int] = set()
        for state in list(self.subscriptions.partitions.values()):
            if state.busy or state.error is not None or state.halted or state.retry_at > now or state.paused:
                continue
            if state.needs_reset:
                to_reset.append(state)
            elif self._fetchable(state, now):
                if state.leader is None or self.cluster.metadata_stale:
                    state.leader = await self._leader(state)
                if state.leader is not None:
                    nodes.add(state.leader)
        if to_reset:
            for state in to_reset:
                state.busy = True
            tg.create_task(self._reset_task(to_reset))
        for node in nodes:
            if node not in self._node_tasks:
                self._node_tasks[node] = tg.create_task(self._fetch_loop(node), name=f"pulllog-fetch-{node}")
        # Backed-off partitions (including any that just failed to find their leader) wake the loop.
        retry_at = [s.retry_at for s in self.subscriptions.partitions.values() if not s.busy and s.error is None and not s.halted
                    and not s.paused and s.retry_at > now]
        if not retry_at:
            return None
        return max(min(retry_at) - time.monotonic(), 0.001)

    async def _leader(self, state: PartitionState) -> int | None:
        try:
            info = await self.cluster.partition_info(state.tp.topic, state.tp.partition)
        except (KafkaError, ConnectionError) as exc:
            self._back_off([state], f"no leader for {state.tp.topic}-{state.tp.partition} yet ({exc})")
            return None
        if info.leader < 0:
            # A leader is being elected (its broker died): ask again after the back-off, or
            # the metadata that said so would be kept until metadata.max.age.ms.
            self.cluster.invalidate(state.tp.topic)
            self._back_off([state], f"{state.tp.topic}-{state.tp.partition} has no leader")
            return None
        return info.leader

    def _back_off(self, states: Iterable[PartitionState], why: str) -> None:
        log.debug("fetcher backs off: %s", why)
        until = time.monotonic() + self.config.retry_backoff_ms / 1000
        for state in states:
            state.retry_at = until

    async def _fetch_loop(self, node: int) -> None:
        """Keep one Fetch in flight to ``node`` while it leads a fetchable partition.

        The next request is written in the very step that handled the previous response,
        before the application's task runs again. That is what makes prefetch work: an
        application reading buffered records never yields to the event loop until it runs
        out, so a request left to another task would only go out then.
        """
        try:
            while not self.cluster.metadata_stale:  # else back to _launch, which refreshes
                now = time.monotonic()
                partitions = self.subscriptions.partitions.values()
                states = [s for s in partitions if s.leader == node and self._fetchable(s, now)]
                if not states or not await self._guarded(self._fetch(node, states), states):
                    return
        except Exception as exc:
            self._fatal(exc)
        finally:
            self._node_tasks.pop(node, None)
            self._wakeup.set()

    async def _reset_task(self, states: list[PartitionState]) -> None:
        try:
            await self._guarded(self._reset(states), states)
        finally:
            self._wakeup.set()

    async def _guarded(self, work: Coroutine[Any, Any, None], states: list[PartitionState]) -> bool:
        """Run one request for ``states`` (busy meanwhile); on failure, back them off or park
        the error on them, and return False."""
        for state in states:
            state.busy = True
        try:
            await work
            return True
        except (ConnectionError, TimeoutError) as exc:
            self.cluster.invalidate()
            self._forget_leaders(states)
            self._back_off(states, str(exc) or type(exc).__name__)
        except KafkaError as exc:
            if exc.retriable:
                self.cluster.invalidate()
                self._forget_leaders(states)
                self._back_off(states, str(exc))
            else:
                for state in states:
                    self.fail(state, exc)
        except UnsupportedByBrokerError as exc:
            for state in states:
                self.fail(state, KafkaError(ErrorCode.unsupported_version, str(exc)))
        finally:
            for state in states:
                state.busy = False
        return False

    @staticmethod
    def _forget_leaders(states: Iterable[PartitionState]) -> None:
        for state in states:
            state.leader = None

    # ------------------------------------------------------------------ Fetch

    async def _fetch(self, node: int, states: list[PartitionState]) -> None:
        cfg = self.config
        conn = await self.cluster.connection(node)
        version = conn.version("fetch", FETCH_REQUEST_MIN_VERSION, FETCH_REQUEST_MAX_VERSION)
        # Rotate, then group by topic in order of first appearance (see the module docstring).
        self._rotation = (self._rotation + 1) % len(states)
        order = states[self._rotation:] + states[:self._rotation]
        sent: dict[tuple[str, int], tuple[PartitionState, int, int]] = {}
        topics: dict[str, list[tuple[int, int]]] = {}
        for state in order:
            offset = state.fetch_offset
            assert offset is not None
            sent[(state.tp.topic, state.tp.partition)] = (state, state.epoch, offset)
            topics.setdefault(state.tp.topic, []).append((state.tp.partition, offset))
        encode = functools.partial(
            encode_fetch_request, version, max_wait_ms=cfg.max_wait_ms, min_bytes=cfg.min_bytes,
            max_bytes=cfg.max_bytes, isolation_level=1 if cfg.read_committed else 0, topics=list(topics.items()),
            partition_max_bytes=cfg.max_partition_bytes)
        async with asyncio.timeout((cfg.request_timeout_ms + cfg.max_wait_ms) / 1000):
            response = await conn.request_encoded("fetch", version, encode)
        self._handle_fetch_response(response, sent)

    def _handle_fetch_response(self, response: Any,
                               sent: dict[tuple[str, int], tuple[PartitionState, int, int]]) -> None:
        cfg = self.config
        seen_data = False
        for topic in response.responses:
            for part in topic.partitions:
                entry = sent.get((topic.topic, int(part.partition_index)))
                if entry is None:
                    continue
                state, epoch, offset = entry
                records = part.records
                # KIP-74: only the first partition with data may exceed its max bytes.
                must_hold_a_batch = bool(records) and not seen_data
                seen_data = seen_data or bool(records)
                if not self.subscriptions.owns(state) or state.epoch != epoch or state.fetch_offset != offset:
                    continue  # the application moved the position meanwhile
                code = part.error_code
                if code == ErrorCode.none:
                    state.highwater = int(part.high_watermark)
                    state.last_stable_offset = int(part.last_stable_offset)
                    state.log_start_offset = int(getattr(part, "log_start_offset", -1))
                    if not records:
                        continue
                    aborted = part.aborted_transactions
                    chunk = CompletedFetch(
                        state.tp, bytes(records), offset, check_crcs=cfg.check_crcs, read_committed=cfg.read_committed,
                        aborted_transactions=[(int(a.producer_id), int(a.first_offset)) for a in aborted or ()],
                        must_hold_a_batch=must_hold_a_batch)
                    if not chunk.has_data:
                        continue  # only the start of a batch: cut by max_bytes, asked again next time
                    state.chunks.append(chunk)
                    if chunk.next_offset is not None:
                        state.fetch_offset = chunk.next_offset
                    if chunk.broken:
                        state.halted = True
                    self.data_ready.set()
                elif code == ErrorCode.offset_out_of_range:
                    self._out_of_range(state, offset, part)
                elif code.retriable and code != ErrorCode.corrupt_message:
                    self.cluster.invalidate(state.tp.topic)
                    state.leader = None
                    self._back_off([state], f"{state.tp.topic}-{state.tp.partition}: {code.name}")
                else:
                    self.fail(state, KafkaError(code, (
                        f"fetching {state.tp.topic}-{state.tp.partition} at offset {offset} failed: "
                        f"{code.name.upper()} ({int(code.value)})")))

    def _out_of_range(self, state: PartitionState, offset: int, part: Any) -> None:
        tp = state.tp
        start = int(getattr(part, "log_start_offset", -1))
        hw = int(part.high_watermark)
        start_or_none = start if start >= 0 else None
        hw_or_none = hw if hw >= 0 else None
        if self.config.auto_offset_reset == "none":
            self.fail(state, OffsetOutOfRangeError(tp, (
                f"offset {offset} is out of range for {tp.topic}-{tp.partition}: "
                f"{_valid_range(start_or_none, hw_or_none)}; seek() to one of them, or use "
                "auto_offset_reset='earliest' or 'latest'"), start_or_none, hw_or_none))
            return
        log.info("offset %d is out of range for %s-%d; resetting to the %s offset", offset, tp.topic, tp.partition,
                 self.config.auto_offset_reset)
        self.subscriptions.reset_after_out_of_range(state)

    # ------------------------------------------------------------------ positions

    async def _reset(self, states: list[PartitionState]) -> None:
        """Give partitions without a position one: the committed offset, else per ``auto_offset_reset``."""
        policy = self.config.auto_offset_reset
        epochs = {id(s): s.epoch for s in states}
        if self.committed is not None and any(s.use_committed for s in states):
            try:
                committed = await self.committed([s.tp for s in states if s.use_committed])
            except (KafkaError, ConnectionError, TimeoutError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    for state in states:
                        self.fail(state, exc)
                else:
                    self._back_off(states, f"committed offsets: {exc}")
                self.positions_changed.set()
                return
            left = []
            for state in states:
                offset = committed.get(state.tp)
                if offset is None:
                    left.append(state)
                elif self.subscriptions.owns(state) and state.epoch == epochs[id(state)] and state.position is None:
                    self.subscriptions.move(state, offset)
            states = left
            if not states:
                self.positions_changed.set()
                return
        try:
            if policy == "none":
                starts = await self.list_offsets({s.tp: EARLIEST for s in states})
                ends = await self.list_offsets({s.tp: LATEST for s in states})
            else:
                found = await self.list_offsets({s.tp: _RESET_TIMESTAMPS[policy] for s in states})
        except KafkaError as exc:
            # An unknown topic is retried quietly, as Kafka's consumer does: it may be created later.
            if exc.retriable or isinstance(exc, UnknownTopicError):
                self._back_off(states, str(exc))
            else:
                for state in states:
                    self.fail(state, exc)
            self.positions_changed.set()
            return
        for state in states:
            if not self.subscriptions.owns(state) or state.epoch != epochs[id(state)] or state.position is not None:
                continue
            tp = state.tp
            if policy == "none":
                start, end = starts[tp][0], ends[tp][0]
                self.fail(state, NoOffsetForPartitionError(tp, (
                    f"{tp.topic}-{tp.partition} has no position (nothing seeked, nothing committed) and "
                    f"auto_offset_reset='none': {_valid_range(start, end)}; seek() to one of "
                    "them, or use auto_offset_reset='earliest' or 'latest'"), start, end))
                continue
            self.subscriptions.move(state, found[tp][0])
        self.positions_changed.set()

    async def list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets: ``{tp: timestamp or EARLIEST / LATEST}`` -> ``{tp: (offset, timestamp)}``.

        The offset is -1 when no record has a timestamp at or after the one asked for.
        Retriable errors are retried until ``request_timeout_ms``; others raise KafkaError.
        """
        cfg = self.config
        result: dict[TopicPartition, tuple[int, int]] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + cfg.request_timeout_ms / 1000
        last_error: BaseException | None = None
        while pending:
            if time.monotonic() > deadline:
                raise KafkaError(ErrorCode.request_timed_out, (
                    f"ListOffsets for {', '.join(f'{tp.topic}-{tp.partition}' for tp in pending)} did not succeed "
                    f"within request_timeout_ms={cfg.request_timeout_ms} (last error: {last_error})"))
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                info = await self.cluster.partition_info(tp.topic, tp.partition)  # UnknownTopicError propagates
                by_node.setdefault(info.leader, []).append(tp)
            retry = False
            for node, tps in by_node.items():
                try:
                    answers = await self._list_offsets_from(node, {tp: pending[tp] for tp in tps})
                except (ConnectionClosedError, BrokerUnreachableError, TimeoutError) as exc:
                    last_error = exc
                    self.cluster.invalidate()
                    retry = True
                    continue
                for tp, (code, offset, timestamp) in answers.items():
                    if code == ErrorCode.none:
                        result[tp] = (offset, timestamp)
                        del pending[tp]
                    elif code.retriable:
                        last_error = KafkaError(code)
                        self.cluster.invalidate(tp.topic)
                        retry = True
                    else:
                        raise KafkaError(code, f"ListOffsets for {tp.topic}-{tp.partition} failed: "
                                               f"{code.name.upper()} ({int(code.value)})")
            if pending and retry:
                await asyncio.sleep(cfg.retry_backoff_ms / 1000)
        return result

    async def _list_offsets_from(self, node: int, wanted: dict[TopicPartition, int]
                                 ) -> dict[TopicPartition, tuple[ErrorCode, int, int]]:
        conn = await self.cluster.connection(node)
        version = conn.version("list_offsets", 1, 7)
        topics: dict[str, list[dict[str, int]]] = {}
        for tp, timestamp in wanted.items():
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": timestamp, "current_leader_epoch": -1})
        request = {"replica_id": -1, "isolation_level": 1 if self.config.read_committed else 0,
                   "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}
        async with asyncio.timeout(self.config.request_timeout_ms / 1000):
            response = await conn.request("list_offsets", version, request)
        out: dict[TopicPartition, tuple[ErrorCode, int, int]] = {}
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, int(part.partition_index))
                if tp in wanted:
                    out[tp] = (part.error_code, int(part.offset), int(part.timestamp))
        missing = set(wanted) - set(out)
        for tp in missing:
            out[tp] = (ErrorCode.unknown_topic_or_partition, -1, -1)
        return out
