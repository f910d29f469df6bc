"""The transaction coordinator: transactional ids, their producers, and two-phase commit.

This broker coordinates every transactional id (FindCoordinator key type 1 says so). A
transaction, as Kafka runs it (KIP-98):

1. InitProducerId(transactional.id) gives the producer its id and a new epoch, which fences
   any older instance of the same id. An older instance's open transaction is aborted first
   (with a bumped epoch, so its late writes are refused); the new one hears
   CONCURRENT_TRANSACTIONS and retries until the abort is complete.
2. AddPartitionsToTxn (and AddOffsetsToTxn, for a group's ``__consumer_offsets`` partition)
   before the producer writes there: the transaction becomes Ongoing.
3. EndTxn: PrepareCommit or PrepareAbort is logged (the outcome is decided), then a marker
   goes to every partition of the transaction through the :class:`TxnMarkerWriter`, then
   CompleteCommit or CompleteAbort is logged.

Every state change is appended to ``__transaction_state`` (compacted; the partition is chosen
by the id's hash; see txn/records.py) before it takes effect, and the topic is replayed at
start: a transaction found in PrepareCommit / PrepareAbort gets its remaining markers then,
so a crash between markers still ends in the decided outcome. Markers that could not be
written (a storage error) are retried by :meth:`TransactionCoordinator.complete_pending`,
which the broker's housekeeping runs with :meth:`abort_timed_out` (transaction.timeout.ms)
and :meth:`expire_transactional_ids` (transactional.id.expiration.ms).

The states and what each request does in each of them are one table: txn/state.py. Handlers
call one method per API with frozen request dataclasses and get frozen results; the live
:class:`TransactionMetadata` records are the coordinator's alone. Everything runs on the
broker's event loop and nothing here awaits: a request's state change, its log append and its
markers happen in one step, so no other request sees a transition half done. When an append
makes ``flush.messages`` due, its fsync is not done here either: the log goes to
``flush_due`` (the broker's, which fsyncs it on a worker thread) and the request's handler
answers once it is done, NOT_COORDINATOR if it failed (as a failed append). The state change
is in memory already then, as the records are in the log (counted as unflushed, so the next
flush retries them).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import re
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from ..log import Log
from ..log.log import wall_clock_ms
from ..net.coordinator_keys import partition_for
from ..records import build_batch
from ..records.decoding import DecodedRecord, decode_records
from . import records as rec
from .state import Effect, Event, IllegalTransitionError, TxnState, step

__all__ = [
    "AddPartitionsRequest",
    "EndTxnRequest",
    "InitProducerIdRequest",
    "InitProducerIdResult",
    "ListTransactionsRequest",
    "ListTransactionsResult",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionListing",
    "TransactionMetadata",
    "TxnMarkerWriter",
]

log = logging.getLogger("pulllog.txn")

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 2**15 - 1
DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000

# Marker answers that settle a partition: written, or the topic is gone (Kafka drops those
# markers too). A fenced producer epoch or coordinator epoch means a newer writer owns the
# partition; retrying could never succeed. Anything else (a storage error) is retried.
_MARKER_SETTLED = frozenset({ErrorCode.none, ErrorCode.unknown_topic_or_partition})
# A cluster member's marker for a partition another broker leads: sent, its answer not back yet.
_MARKER_IN_FLIGHT = ErrorCode.request_timed_out
_MARKER_GIVE_UP = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
                             ErrorCode.transaction_coordinator_fenced})


def _epoch_exhausted(epoch: int) -> bool:
    # Kafka keeps Short.MaxValue back so the coordinator can always fence once more.
    return epoch >= _MAX_EPOCH - 1


class TxnMarkerWriter(Protocol):
    """Writes a commit or abort marker to each partition and says how each went. The broker's
    is ``pulllog.broker.txn_markers.write_txn_markers`` bound to the broker; it also tells the
    group coordinator about ``__consumer_offsets`` partitions."""

    def __call__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, ErrorCode]: ...


class TopicStore(Protocol):
    """What the coordinator needs of the broker's topics: the logs of ``__transaction_state``
    and to create it on first use (the broker's TopicManager is one)."""

    def partition_logs(self, name: str) -> Sequence[Log] | None: ...

    def hosted_log(self, name: str, index: int) -> Log | None: ...

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> object: ...

    def offline_reason(self, name: str) -> str | None: ...


@dataclass(eq=False)
class TransactionMetadata:
    """One transactional id's state (the coordinator's own record; never handed out)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch before the last bump: a producer retrying that bump (KIP-360) gets the same one."""
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    """Ongoing: the transaction's partitions. Prepare*: those still without their marker."""
    start_timestamp: int = -1
    last_update_timestamp: int = -1
    failed_fence: bool = False
    """A fence's abort could not be logged: the epoch is bumped already; do not bump it twice."""

    def log_value(self) -> rec.TransactionLogValue:
        return rec.TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state.id,
                                       tuple(sorted(self.partitions)), self.last_update_timestamp,
                                       self.start_timestamp, self.previous_producer_id)


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str
    timeout_ms: int
    producer_id: int = NO_PRODUCER_ID
    """v3+ (KIP-360): the producer's current id and epoch, when it asks to bump its own epoch."""
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = False
    """v4+ (KIP-890): only check that the partitions are in the transaction (a Produce's check)."""


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of an id. With an error, the rest keeps the schema's
    defaults (zeros), as Kafka answers; an id with no transaction has start time -1."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_timestamp: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ListTransactionsRequest:
    states: frozenset[str] = frozenset()
    """Kafka state names (Ongoing, ...); empty lists every state."""
    producer_ids: frozenset[int] = frozenset()
    min_duration_ms: int = -1
    """v1+ (KIP-994): only transactions running longer than this; negative: all."""
    id_pattern: str | None = None
    """v2+ (KIP-1152): a regular expression the whole transactional id must match."""


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_states: tuple[str, ...] = ()
    transactions: tuple[TransactionListing, ...] = ()


class _Refused(Exception):
    """A request the state (or the producer's id and epoch) refuses, with Kafka's code."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


LOAD_STEP = 1000
"""A cluster member's partition load pauses every this many entries (load_partition_in_steps)."""


def drain(steps: Generator[None, None, int]) -> int:
    """Run a load in steps to its end, at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _state_records(plog: Log) -> Iterable[DecodedRecord]:
    """Every data record of ``plog`` from its log start offset, across compaction's holes."""
    for batch in plog.batches_from_start():
        header = batch.header
        if header.is_control:
            continue
        body = batch.payload()
        yield from decode_records(DecodedRecord, body, 0, len(body), header.records_count, header.base_offset,
                                  header.base_timestamp, 0, -1, rec.TRANSACTION_STATE_TOPIC, 0)


class TransactionCoordinator:
    def __init__(
        self,
        topics: TopicStore,
        markers: TxnMarkerWriter,
        next_producer_id: Callable[[], int],
        *,
        state_partitions: int = 50,
        state_segment_bytes: int = 100 * 1024 * 1024,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS,
        clock: Callable[[], int] = wall_clock_ms,
        flush_due: Callable[[Log], None] | None = None,
        owner: Callable[[int], ErrorCode] | None = None,
        appended: Callable[[Log], None] | None = None,
    ) -> None:
        self.topics = topics
        self.markers = markers
        self.appended = appended
        """A cluster member's: told of every state append, so the request that made it answers
        once the ISR has it (acks=all, as Kafka's coordinator)."""
        self.owner = owner
        """A cluster member's: for a ``__transaction_state`` partition, NONE when this broker
        leads it (and has loaded it), else NOT_COORDINATOR. The partition count is then
        ``state_partitions`` (the cluster's). None: a single broker coordinates every id."""
        self.flush_due = flush_due
        """Given, a state append that makes ``flush.messages`` due does not fsync: the log goes
        to this callable (the broker fsyncs it off the event loop and the request answers
        after). None: the append fsyncs inline, as ``Log.append`` does."""
        self.next_producer_id = next_producer_id
        self.state_partitions = state_partitions
        self.state_segment_bytes = state_segment_bytes
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.clock = clock
        # One broker leads every partition of __transaction_state, for ever: epoch 0. In a
        # cluster, a partition's coordinator epoch is its leader epoch (partition_epochs).
        self.coordinator_epoch = 0
        self.partition_epochs: dict[int, int] = {}
        self.transactions: dict[str, TransactionMetadata] = {}

    # ------------------------------------------------------------------ __transaction_state

    def _state_log(self, transactional_id: str) -> Log:
        name = rec.TRANSACTION_STATE_TOPIC
        if self.owner is not None:  # a cluster member holds the partitions it is a replica of
            index = partition_for(transactional_id, self.state_partitions)
            plog = self.topics.hosted_log(name, index)
            if plog is None or self.owner(index) is not ErrorCode.none:
                raise OSError(errno.EIO, f"{name}-{index} is not led by this broker")
            return plog
        logs = self.topics.partition_logs(name)
        if logs is None and (offline := self.topics.offline_reason(name)) is not None:
            # Creating it afresh would forget every transaction's outcome.
            raise OSError(errno.EIO, f"{name} is offline: {offline}")
        if logs is None:
            self.topics.create(name, self.state_partitions,
                               {"cleanup.policy": "compact", "segment.bytes": str(self.state_segment_bytes)})
            logs = self.topics.partition_logs(name)
            assert logs is not None
        return logs[partition_for(transactional_id, len(logs))]

    def _write(self, transactional_id: str, value: bytes | None) -> None:
        """Append one state (or a tombstone); _Refused(NOT_COORDINATOR) when the log refuses,
        as Kafka answers a failed append, so the client retries."""
        try:
            plog = self._state_log(transactional_id)
            batch = build_batch([(rec.encode_key(transactional_id), value, self.clock())])
            if self.flush_due is None:
                plog.append(batch)
            else:
                plog.append(batch, defer_flush=True)
                if plog.flush_messages_due:
                    self.flush_due(plog)
            if self.appended is not None:
                self.appended(plog)
        except OSError as exc:
            log.error("cannot append to %s for transactional id %r: %s", rec.TRANSACTION_STATE_TOPIC,
                      transactional_id, exc)
            raise _Refused(ErrorCode.not_coordinator) from None

    def load(self) -> int:
        """Replay ``__transaction_state``, then finish the transactions a crash left between
        their two phases; returns how many transactional ids were loaded."""
        logs = self.topics.partition_logs(rec.TRANSACTION_STATE_TOPIC)
        if logs is None:
            return 0
        self.state_partitions = len(logs)
        for plog in logs:
            for record in _state_records(plog):
                self._replay(record.key, record.value)
        resumed = self.complete_pending()
        if resumed:
            log.info("completed %d transaction(s) left between PrepareCommit/PrepareAbort and their markers",
                     resumed)
        return len(self.transactions)

    # ------------------------------------------------------------------ a cluster's partitions

    def ownership_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``transactional_id`` (always, on a single broker)."""
        if self.owner is None:
            return ErrorCode.none
        return self.owner(partition_for(transactional_id, self.state_partitions))

    def set_partition_count(self, partitions: int) -> None:
        """A cluster member: how many partitions the cluster's ``__transaction_state`` has."""
        if partitions > 0:
            self.state_partitions = partitions

    def set_partition_epoch(self, index: int, leader_epoch: int) -> None:
        """Still the leader of ``index``, in a new leader epoch: markers carry it from now on."""
        self.partition_epochs[index] = leader_epoch

    def _epoch_of(self, transactional_id: str) -> int:
        if not self.partition_epochs:
            return self.coordinator_epoch
        return self.partition_epochs.get(partition_for(transactional_id, self.state_partitions),
                                         self.coordinator_epoch)

    def load_partition(self, index: int, leader_epoch: int = 0) -> int:
        """This broker became the leader of ``__transaction_state`` partition ``index`` in
        ``leader_epoch`` (its coordinator epoch from now on): replay the partition, then send
        the markers its PrepareCommit / PrepareAbort transactions still miss, as a single
        broker's start does. Returns how many transactional ids it holds."""
        return drain(self.load_partition_in_steps(index, leader_epoch))

    def load_partition_in_steps(self, index: int, leader_epoch: int = 0,
                                step: int = LOAD_STEP) -> Generator[None, None, int]:
        """:meth:`load_partition`, pausing (a ``yield``) every ``step`` records, so that the
        broker serves other requests meanwhile. Until it returns, the broker answers this
        partition's transactional ids COORDINATOR_LOAD_IN_PROGRESS; if it is abandoned
        midway, the broker unloads the partition (what it replayed goes)."""
        self.unload_partition(index)
        self.partition_epochs[index] = leader_epoch
        plog = self.topics.hosted_log(rec.TRANSACTION_STATE_TOPIC, index)
        if plog is None:
            return 0
        for seen, record in enumerate(_state_records(plog), 1):
            self._replay(record.key, record.value)
            if seen % step == 0:
                yield
        mine = [txn for tid, txn in self.transactions.items()
                if partition_for(tid, self.state_partitions) == index]
        for txn in mine:
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._send_markers(txn)
        return len(mine)

    def unload_partition(self, index: int) -> int:
        """No longer the leader of ``index``: forget its transactional ids (the new leader
        loads them from the replicated log and finishes what is pending)."""
        gone = [tid for tid in self.transactions if partition_for(tid, self.state_partitions) == index]
        for tid in gone:
            del self.transactions[tid]
        self.partition_epochs.pop(index, None)
        return len(gone)

    def _replay(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            transactional_id = rec.decode_key(key)
            if value is None:
                self.transactions.pop(transactional_id, None)
                return
            v = rec.decode_value(value)
            state = TxnState.from_id(v.state_id)
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            log.warning("skipping an unreadable %s record: %s", rec.TRANSACTION_STATE_TOPIC, exc)
            return
        self.transactions[transactional_id] = TransactionMetadata(
            transactional_id, v.producer_id, v.producer_epoch, NO_PRODUCER_EPOCH, v.previous_producer_id,
            v.timeout_ms, state, set(v.partitions) if state is not TxnState.EMPTY else set(),
            v.start_timestamp, v.last_update_timestamp)

    # ------------------------------------------------------------------ the state machine

    def _run(self, txn: TransactionMetadata, event: Event, *, partitions: Iterable[TopicPartition] = (),
             timeout_ms: int | None = None, expected_epoch: int | None = None) -> ErrorCode:
        """Take ``event`` in ``txn``'s state: the table's step, its effects in order. A step
        that logs a state works on a copy, installed once the append succeeded."""
        todo = step(txn.state, event)
        if todo.next is None:
            return ErrorCode[todo.answer]
        now = self.clock()
        new = dataclasses.replace(txn, partitions=set(txn.partitions), state=todo.next, last_update_timestamp=now)
        installed = False

        def install() -> None:
            nonlocal installed
            if not installed:
                for f in dataclasses.fields(txn):
                    setattr(txn, f.name, getattr(new, f.name))
                installed = True

        for effect in todo.effects:
            if effect is Effect.NEW_EPOCH:
                self._new_epoch(txn, new, timeout_ms, expected_epoch)
            elif effect is Effect.FENCE_EPOCH:
                if not txn.failed_fence:
                    new.producer_epoch = txn.producer_epoch + 1
                new.last_producer_epoch = NO_PRODUCER_EPOCH
            elif effect is Effect.START:
                new.start_timestamp = now
            elif effect is Effect.ADD_PARTITIONS:
                new.partitions.update(partitions)
            elif effect is Effect.CLEAR_PARTITIONS:
                new.partitions.clear()
            elif effect is Effect.WRITE_STATE:
                self._write(txn.transactional_id, rec.encode_value(new.log_value()))
                new.failed_fence = False
            elif effect is Effect.WRITE_TOMBSTONE:
                self._write(txn.transactional_id, None)
                self.transactions.pop(txn.transactional_id, None)
            elif effect is Effect.WRITE_MARKERS:
                install()
                self._send_markers(txn)
            elif effect is Effect.THEN_ABORT:
                install()
                self._fence_then_abort(txn)
        install()
        return ErrorCode[todo.answer]

    def _fence_then_abort(self, txn: TransactionMetadata) -> None:
        try:
            self._run(txn, Event.ABORT)
        except _Refused:
            if txn.state is TxnState.PREPARE_EPOCH_FENCE:
                # PrepareAbort with the bumped epoch was not logged: back to Ongoing, keeping
                # the epoch in memory (never handed out), so the next attempt does not bump
                # it again (as Kafka).
                txn.state, txn.failed_fence = TxnState.ONGOING, True
            raise

    def _new_epoch(self, txn: TransactionMetadata, new: TransactionMetadata, timeout_ms: int | None,
                   expected_epoch: int | None) -> None:
        """InitProducerId's epoch (Kafka's prepareIncrementProducerEpoch / producer id rotation)."""
        if timeout_ms is not None:
            new.timeout_ms = timeout_ms
        new.start_timestamp = -1
        new.previous_producer_id = txn.producer_id
        if _epoch_exhausted(txn.producer_epoch) and expected_epoch in (None, txn.producer_epoch):
            new.producer_id, new.producer_epoch = self.next_producer_id(), 0
            new.last_producer_epoch = txn.producer_epoch if expected_epoch is not None else NO_PRODUCER_EPOCH
        elif expected_epoch is None:
            new.producer_epoch, new.last_producer_epoch = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            new.producer_epoch, new.last_producer_epoch = txn.producer_epoch + 1, txn.producer_epoch
        elif expected_epoch == txn.last_producer_epoch:
            # A retry of a bump that succeeded: the same epoch again, nothing fenced.
            new.producer_epoch, new.last_producer_epoch = txn.producer_epoch, txn.last_producer_epoch
        else:
            raise _Refused(ErrorCode.producer_fenced)

    def _send_markers(self, txn: TransactionMetadata) -> None:
        """Markers to the partitions still without one; MARKERS_WRITTEN once none is left."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        results = self.markers(txn.producer_id, txn.producer_epoch, commit, self._epoch_of(txn.transactional_id),
                               sorted(txn.partitions))
        for tp, code in results.items():
            if code in _MARKER_SETTLED:
                txn.partitions.discard(tp)
            elif code == _MARKER_IN_FLIGHT:
                continue
            elif code in _MARKER_GIVE_UP:
                log.warning("marker for transactional id %r on %s-%d refused (%s): a newer producer epoch "
                            "owns the partition; not retrying", txn.transactional_id, tp[0], tp[1], code.name)
                txn.partitions.discard(tp)
            else:
                log.warning("marker for transactional id %r on %s-%d failed (%s); retrying later",
                            txn.transactional_id, tp[0], tp[1], code.name)
        if not txn.partitions:
            try:
                self._run(txn, Event.MARKERS_WRITTEN)
            except _Refused:
                pass  # the outcome is decided and every marker written: complete_pending logs it later

    # ------------------------------------------------------------------ checks

    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state is TxnState.DEAD or txn.producer_id != producer_id:
            raise _Refused(ErrorCode.invalid_producer_id_mapping)
        if txn.producer_epoch != producer_epoch:
            raise _Refused(ErrorCode.producer_fenced)
        return txn

    def _valid_expected_producer(self, txn: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
        """KIP-360: may this producer (id and epoch given) bump its own epoch? (Kafka's rules)"""
        return (txn.producer_epoch == NO_PRODUCER_EPOCH or producer_id == txn.producer_id
                or (producer_id == txn.previous_producer_id and _epoch_exhausted(producer_epoch)))

    # ------------------------------------------------------------------ the APIs

    def init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResult:
        if not request.transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        if (not_ours := self.ownership_error(request.transactional_id)) is not ErrorCode.none:
            return InitProducerIdResult(not_ours)
        if not 0 < request.timeout_ms <= self.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        txn = self.transactions.get(request.transactional_id)
        created = txn is None or txn.state is TxnState.DEAD
        if txn is None or txn.state is TxnState.DEAD:
            txn = TransactionMetadata(request.transactional_id, self.next_producer_id(), timeout_ms=request.timeout_ms,
                                      last_update_timestamp=self.clock())
            self.transactions[request.transactional_id] = txn
        expected = request.producer_id >= 0
        if expected and not self._valid_expected_producer(txn, request.producer_id, request.producer_epoch):
            return InitProducerIdResult(ErrorCode.producer_fenced)
        try:
            code = self._run(txn, Event.INIT, timeout_ms=request.timeout_ms,
                             expected_epoch=request.producer_epoch if expected else None)
        except _Refused as refused:
            if created:
                self.transactions.pop(request.transactional_id, None)
            return InitProducerIdResult(refused.code)
        if code != ErrorCode.none:
            return InitProducerIdResult(code)
        log.info("initialized transactional id %r with producer id %d and epoch %d", txn.transactional_id,
                 txn.producer_id, txn.producer_epoch)
        return InitProducerIdResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)

    def add_partitions(self, request: AddPartitionsRequest) -> dict[TopicPartition, ErrorCode]:
        """One code per partition: the same for all when adding (Kafka's), per partition when
        only verifying (NONE, or TRANSACTION_ABORTABLE for a partition not in the transaction)."""
        if request.verify_only:
            return self.verify(request.transactional_id, request.producer_id, request.producer_epoch,
                               request.partitions)
        code = self._add(request)
        return {tp: code for tp in request.partitions}

    def _add(self, request: AddPartitionsRequest) -> ErrorCode:
        if not request.transactional_id:
            return ErrorCode.invalid_request
        if (not_ours := self.ownership_error(request.transactional_id)) is not ErrorCode.none:
            return not_ours
        try:
            txn = self._producer(request.transactional_id, request.producer_id, request.producer_epoch)
            if txn.state is TxnState.ONGOING and txn.partitions.issuperset(request.partitions):
                return ErrorCode.none  # nothing new: nothing to log
            return self._run(txn, Event.ADD_PARTITIONS, partitions=request.partitions)
        except _Refused as refused:
            return refused.code
        except IllegalTransitionError:
            return ErrorCode.invalid_txn_state

    def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Kafka 4's check of a transactional Produce (KIP-890 part 1): is each partition in
        the producer's transaction?"""
        partitions = tuple(partitions)
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        if (not_ours := self.ownership_error(transactional_id)) is not ErrorCode.none:
            return dict.fromkeys(partitions, not_ours)
        try:
            txn = self._producer(transactional_id, producer_id, producer_epoch)
        except _Refused as refused:
            return dict.fromkeys(partitions, refused.code)
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return dict.fromkeys(partitions, ErrorCode.concurrent_transactions)
        ongoing = txn.state is TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in txn.partitions else ErrorCode.transaction_abortable
                for tp in partitions}

    def end_txn(self, request: EndTxnRequest) -> ErrorCode:
        if not request.transactional_id:
            return ErrorCode.invalid_request
        if (not_ours := self.ownership_error(request.transactional_id)) is not ErrorCode.none:
            return not_ours
        try:
            txn = self._producer(request.transactional_id, request.producer_id, request.producer_epoch)
            return self._run(txn, Event.COMMIT if request.commit else Event.ABORT)
        except _Refused as refused:
            return refused.code
        except IllegalTransitionError as exc:
            log.info("EndTxn for transactional id %r refused: %s", request.transactional_id, exc)
            return ErrorCode.invalid_txn_state

    def describe(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(transactional_id, ErrorCode.invalid_request)
        if (not_ours := self.ownership_error(transactional_id)) is not ErrorCode.none:
            return TransactionDescription(transactional_id, not_ours)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state is TxnState.DEAD:
            return TransactionDescription(transactional_id, ErrorCode.transactional_id_not_found)
        return TransactionDescription(transactional_id, ErrorCode.none, txn.state.kafka_name, txn.timeout_ms,
                                      txn.start_timestamp, txn.producer_id, txn.producer_epoch,
                                      tuple(sorted(txn.partitions)))

    def list_transactions(self, request: ListTransactionsRequest) -> ListTransactionsResult:
        states: set[TxnState] = set()
        unknown = []
        for name in sorted(request.states):
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        try:
            pattern = re.compile(request.id_pattern) if request.id_pattern else None
        except re.error:
            return ListTransactionsResult(ErrorCode.invalid_regular_expression)
        now = self.clock()
        listed = []
        for txn in self.transactions.values():
            if txn.state is TxnState.DEAD:
                continue
            if request.producer_ids and txn.producer_id not in request.producer_ids:
                continue
            if request.states and txn.state not in states:  # only unknown names: nothing matches (Kafka's)
                continue
            # As Kafka: an id with no transaction (start time -1) counts as running for ever.
            if request.min_duration_ms >= 0 and now - txn.start_timestamp <= request.min_duration_ms:
                continue
            if pattern is not None and pattern.fullmatch(txn.transactional_id) is None:
                continue
            listed.append(TransactionListing(txn.transactional_id, txn.producer_id, txn.state.kafka_name))
        return ListTransactionsResult(ErrorCode.none, tuple(unknown), tuple(listed))

    # ------------------------------------------------------------------ housekeeping

    def abort_timed_out(self, now: int | None = None) -> int:
        """Fence and abort every Ongoing transaction older than its transaction.timeout.ms."""
        now = self.clock() if now is None else now
        aborted = 0
        for txn in list(self.transactions.values()):
            if txn.state is not TxnState.ONGOING or txn.start_timestamp + txn.timeout_ms >= now:
                continue
            try:
                self._run(txn, Event.TIMEOUT)
            except _Refused as refused:
                log.warning("could not abort timed-out transaction %r (%s); retrying later",
                            txn.transactional_id, refused.code.name)
                continue
            aborted += 1
            log.info("aborted transaction %r (producer id %d): open longer than its timeout of %d ms",
                     txn.transactional_id, txn.producer_id, txn.timeout_ms)
        return aborted

    def expire_transactional_ids(self, now: int | None = None) -> int:
        """Forget ids with no transaction for transactional.id.expiration.ms (a tombstone each)."""
        now = self.clock() if now is None else now
        expired = 0
        for txn in list(self.transactions.values()):
            if txn.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                continue
            if txn.last_update_timestamp + self.id_expiration_ms > now:
                continue
            try:
                self._run(txn, Event.EXPIRE)
            except _Refused:
                continue
            expired += 1
        return expired

    def complete_pending(self) -> int:
        """Write the markers still missing for PrepareCommit / PrepareAbort transactions."""
        pending = [txn for txn in self.transactions.values()
                   if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)]
        for txn in pending:
            self._send_markers(txn)
        return len(pending)
