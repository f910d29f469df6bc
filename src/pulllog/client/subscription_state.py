"""The consumer's subscription, assignment and positions: one owner for all three.

The Consumer (the application's calls), the Fetcher (Fetch and ListOffsets) and the group
membership (rebalances, commits) all read and change the same facts about a consumer's
partitions. They all go through one :class:`SubscriptionState`; none keeps a copy.

What it holds:

    subscription      what ``subscribe()`` was given (topic names and patterns), or None
    subscribed topics the subscription evaluated against the cluster's topics (the names,
                      plus the topics the patterns match now); the group assigns from these
    assignment        one :class:`PartitionState` per assigned partition, in assignment order
    failed            partitions with an error parked for the application
    held              partitions with records handed to the application that it has not come
                      back from (not processed yet, so not committed by auto-commit)
    reading           the partition the application reads from until its chunk ends

Per partition (:class:`PartitionState`): ``position`` (the next record the application
gets; None means it *needs a reset*: the committed offset, else ``auto_offset_reset``),
``processed`` (what auto-commit commits), ``fetch_offset`` and the buffered chunks, the
``paused`` flag (being revoked: neither fetched nor handed out), the high watermark, last
stable offset and log start offset from the last Fetch.

Rules it keeps:

- A consumer either subscribes (the group assigns its partitions) or assigns them itself,
  never both: :meth:`SubscriptionState.assign_from_user` while subscribed, or
  :meth:`SubscriptionState.subscribe` with user-assigned partitions, raise ValueError.
- Moving a position from outside (seek, reset) voids what is buffered and what is in
  flight for the partition: its ``epoch`` goes up, and a Fetch answer carrying an older
  epoch is dropped on arrival.
- A partition dropped from the assignment is dropped from ``failed``, ``held`` and
  ``reading`` too, and a PartitionState never comes back: a partition assigned again gets
  a new one, so an answer for the old one is recognised as stale (``owns``).
- Every change that gives the fetcher something new to do calls the listeners (the
  fetcher's wake-up).

Everything here runs on the event loop, without awaiting: each change is atomic.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .types import TopicPartition

if TYPE_CHECKING:
    from .completed_fetch import CompletedFetch
    from .errors import KafkaError

__all__ = ["PartitionState", "SubscriptionSpec", "SubscriptionState"]


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    """What ``subscribe()`` was given: topic names, and patterns matched against every topic
    (``re.search``, as librdkafka does; internal topics never match)."""

    topics: frozenset[str]
    patterns: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def parse(cls, topics: str | re.Pattern[str] | Iterable[str | re.Pattern[str]]) -> SubscriptionSpec:
        items = [topics] if isinstance(topics, (str, re.Pattern)) else list(topics)
        names: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for item in items:
            if isinstance(item, re.Pattern):
                patterns.append(item)
            elif isinstance(item, str) and item.startswith("^"):
                try:
                    patterns.append(re.compile(item))
                except re.error as exc:
                    raise ValueError(f"subscribe(): {item!r} is not a valid regular expression: {exc}") from None
            elif isinstance(item, str) and item:
                names.add(item)
            else:
                raise TypeError(f"subscribe() takes topic names and regex patterns, not {item!r}")
        if not names and not patterns:
            raise ValueError("subscribe() needs at least one topic or pattern; to stop, call unsubscribe()")
        return cls(frozenset(names), tuple(patterns))

    def matches(self, topic: str) -> bool:
        return topic in self.topics or any(p.search(topic) for p in self.patterns)


@dataclass(eq=False, slots=True)
class PartitionState:
    """One assigned partition (see the module docstring); mutable, owned by a SubscriptionState."""

    tp: TopicPartition
    position: int | None = None  # None: needs a reset
    processed: int | None = None
    fetch_offset: int | None = None
    chunks: deque[CompletedFetch] = field(default_factory=deque)
    epoch: int = 0
    error: KafkaError | None = None
    halted: bool = False  # the buffered data ends in a batch we cannot walk past
    busy: bool = False  # a Fetch or ListOffsets for it is in flight
    paused: bool = False  # being revoked: not fetched, not handed out
    use_committed: bool = True  # a reset starts at the committed offset (not after OFFSET_OUT_OF_RANGE)
    leader: int | None = None  # the broker that leads it, as last seen in the metadata
    retry_at: float = 0.0  # time.monotonic() before which not to fetch it
    highwater: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None

    @property
    def needs_reset(self) -> bool:
        return self.position is None

    def move_to(self, offset: int | None) -> None:
        """Set the position from outside (seek, reset): buffered data and fetches in flight are void."""
        self.position = self.processed = self.fetch_offset = offset
        self.chunks.clear()
        self.epoch += 1
        self.error = None
        self.halted = False
        self.retry_at = 0.0


class SubscriptionState:
    """The one owner of a consumer's subscription, assignment and positions."""

    def __init__(self) -> None:
        self.subscription: SubscriptionSpec | None = None
        self.subscribed_topics: frozenset[str] = frozenset()
        # Read directly by the hot paths (the fetcher's loops, the consumer's record iterator).
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.failed: set[PartitionState] = set()
        self.held: set[PartitionState] = set()
        self.reading: PartitionState | None = None
        self._listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever the assignment or a position changes from outside the fetcher."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # ------------------------------------------------------------------ subscription

    @property
    def subscribed(self) -> bool:
        """The group assigns the partitions (else the application does, with assign())."""
        return self.subscription is not None

    def subscribe(self, spec: SubscriptionSpec) -> None:
        if self.subscription is None and self.partitions:
            raise ValueError("this consumer has assign()ed partitions; assign([]) first, then subscribe()")
        self.subscription = spec
        self.subscribed_topics = frozenset(spec.topics)

    def match_topics(self, topics: Iterable[str]) -> bool:
        """Re-evaluate the subscription against these (non-internal) topics; True if the
        subscribed topics changed."""
        spec = self.subscription
        if spec is None:
            return False
        matched = frozenset(spec.topics) if not spec.patterns else frozenset(t for t in topics if spec.matches(t))
        if matched == self.subscribed_topics:
            return False
        self.subscribed_topics = matched
        return True

    def unsubscribe(self) -> None:
        self.subscription = None
        self.subscribed_topics = frozenset()

    # ------------------------------------------------------------------ assignment

    def assigned(self) -> set[TopicPartition]:
        return set(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def get(self, tp: TopicPartition) -> PartitionState | None:
        return self.partitions.get(tp)

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of an assigned partition; ValueError if it is not assigned."""
        state = self.partitions.get(tp)
        if state is None:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer; assign() it first")
        return state

    def owns(self, state: PartitionState) -> bool:
        """Is ``state`` still the state of its partition (not dropped, not replaced)?"""
        return self.partitions.get(state.tp) is state

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """assign(): exactly these partitions. Ones already assigned keep their state."""
        if self.subscription is not None:
            raise ValueError("this consumer subscribe()d: its group assigns its partitions; "
                             "await unsubscribe() first to assign() them yourself")
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"assign() takes TopicPartition objects, not {tp!r}")
        old = self.partitions
        self.partitions = {tp: old.get(tp) or PartitionState(tp) for tp in wanted}
        self._forget(set(old) - set(self.partitions), old)
        self._changed()

    def assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """The group added these: read them (from the committed offset, else per
        auto_offset_reset); ones already assigned are no longer paused."""
        for tp in partitions:
            state = self.partitions.get(tp)
            if state is None:
                self.partitions[tp] = PartitionState(tp)
            else:
                state.paused = False
        self._changed()

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        """The group took these away (revoked or lost)."""
        old = dict(self.partitions)
        for tp in partitions:
            self.partitions.pop(tp, None)
        self._forget(set(old) - set(self.partitions), old)
        self._changed()

    def _forget(self, dropped: set[TopicPartition], old: Mapping[TopicPartition, PartitionState]) -> None:
        for tp in dropped:
            state = old[tp]
            self.failed.discard(state)
            self.held.discard(state)
            if self.reading is state:
                self.reading = None

    # ------------------------------------------------------------------ positions

    def seek(self, tp: TopicPartition, offset: int | None) -> None:
        """Move ``tp``'s position (None: reset it); buffered records and its error are dropped."""
        self.move(self.state(tp), offset)

    def move(self, state: PartitionState, offset: int | None) -> None:
        state.move_to(offset)
        self.failed.discard(state)
        self._changed()

    def reset_after_out_of_range(self, state: PartitionState) -> None:
        """OFFSET_OUT_OF_RANGE: reset per auto_offset_reset, not to the committed offset (it
        may be the offset out of range)."""
        state.move_to(None)
        state.use_committed = False

    def set_error(self, state: PartitionState, error: KafkaError) -> None:
        """Park an error on the partition; the application gets it when it reads the partition."""
        state.error = error
        self.failed.add(state)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Hand out no more records of these, and fetch no more (they are being revoked)."""
        for tp in partitions:
            state = self.partitions.get(tp)
            if state is not None:
                state.paused = True

    def consumed(self, state: PartitionState, next_offset: int) -> None:
        """Records up to ``next_offset`` were handed to the application."""
        state.position = next_offset
        self.held.add(state)

    def ack(self, only: frozenset[TopicPartition] | None = None) -> None:
        """The application came back for more records (of ``only``, or of all partitions):
        what it was handed before is processed."""
        if only is None:
            for state in self.held:
                state.processed = state.position
            self.held.clear()
        else:
            for state in [s for s in self.held if s.tp in only]:
                state.processed = state.position
                self.held.discard(state)

    def holds_any(self, partitions: set[TopicPartition]) -> bool:
        """Does the application still hold unprocessed records of any of these?"""
        return any(s.tp in partitions for s in self.held)

    def positions(self) -> dict[TopicPartition, int]:
        """The position of every assigned partition that has one."""
        return {tp: s.position for tp, s in self.partitions.items() if s.position is not None}

    def processed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The processed offset (what auto-commit commits) of these, where there is one."""
        parts = self.partitions
        return {tp: s.processed for tp in partitions if (s := parts.get(tp)) is not None and s.processed is not None}
