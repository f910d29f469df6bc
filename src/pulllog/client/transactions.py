"""The transactional producer's state and rules: Kafka's TransactionManager, with no I/O.

A producer with a ``transactional_id`` writes to several partitions (and commits a consumer
group's offsets) all or nothing (KIP-98). ``TransactionManager`` keeps what the Java
client's TransactionManager keeps and decides what it decides; the producer
(``pulllog.client.producer``), its sender and ``pulllog.client.txn_coordinator`` send the
requests and feed the answers back. It is an ``IdempotenceManager``: a transactional
producer is idempotent, with the same producer id, epoch and sequences.

The requests, in the order a transaction makes them (Kafka's order)::

    init_transactions()      FindCoordinator(TRANSACTION, id) -> InitProducerId(id, timeout)
    begin_transaction()      nothing on the wire
    send(...) to a partition AddPartitionsToTxn (every partition new to the transaction since
                             the last one, in one request) before its first Produce
    send_offsets_to_...()    AddOffsetsToTxn(group) -> FindCoordinator(GROUP) ->
                             TxnOffsetCommit (to the group coordinator)
    commit_transaction()     flush every batch, then EndTxn(commit)
    abort_transaction()      fail the unsent batches, wait for those in flight, EndTxn(abort)

A partition's first batch of a transaction waits for AddPartitionsToTxn; the application does
not (its records keep filling the batch). One asyncio thread runs both, though, and
``send()`` yields to the event loop only once per new batch, so each of the few turns the
sender needs before that batch is acknowledged (AddPartitionsToTxn out, its answer in, the
Produce out, its answer in) would wait for the application to fill a batch: milliseconds
per turn, with nothing of the transaction on the wire. So while a partition new to the
transaction has no acknowledged batch yet (``starting_partitions``), ``send()`` yields every
16 records (a fraction of a millisecond), and the pipeline runs again about two round trips
after the first ``send()``. Once none is starting, a record to the partition ``check_send()``
passed last needs no check (``fast_topic``, ``fast_partition``): ``send()`` appends it in
the call, as for an idempotent producer, with no coroutine.

A partition's first batch under the producer's epoch also goes alone: its later batches
wait until it is acknowledged (``sends_alone``). A broker with no state for a producer takes
any sequence (KIP-360), and Kafka's check that a transaction's first Produce is for a
partition added to it (KIP-890 part 1) now and then answers it with a retriable error; a
later batch in flight behind it would then be stored first, and the first batch's retry
refused as out of order for good. Once one batch of the epoch is acknowledged there, the
broker holds the producer's last sequence: a later batch that overtakes a failed one is
refused as out of order (retried behind it), so in later transactions the partition's
batches pipeline from the first (one round trip less at every transaction's start).

EndTxn goes only if the transaction reached the coordinator (a partition or an offset was
added); an empty transaction ends locally. A transaction's batches carry the
transactional bit (attributes bit 4) and the Produce request the transactional id.

States (Kafka's names) and the moves between them, as the table ``_ENTERED_FROM`` says::

    state                  entered from
    UNINITIALIZED          (start)
    INITIALIZING           UNINITIALIZED, ABORTING_TRANSACTION (an epoch bump after an abort)
    READY                  INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
    IN_TRANSACTION         READY
    COMMITTING_TRANSACTION IN_TRANSACTION
    ABORTING_TRANSACTION   IN_TRANSACTION, ABORTABLE_ERROR
    ABORTABLE_ERROR        IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR, INITIALIZING
    FATAL_ERROR            any

A move the table does not allow raises ``TransactionStateError`` naming the call and the
state (begin_transaction() twice, send() outside a transaction, commit after an error...).

Errors, by the Java client's rules (``outcome(api, code)``):

* **fatal** (FATAL_ERROR; every later call raises it; close the producer):
  PRODUCER_FENCED and INVALID_PRODUCER_EPOCH from the coordinator (another instance with
  the same transactional id took over: ``ProducerFencedError``),
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION,
  INVALID_TXN_STATE, and an error a request's rules do not expect (for AddPartitionsToTxn
  such an error is abortable, as in Kafka);
* **abortable** (ABORTABLE_ERROR; ``abort_transaction()`` and go on): everything else that
  fails inside a transaction: a record that failed (also INVALID_PRODUCER_EPOCH from a
  partition: the coordinator aborted the transaction on its timeout, KIP-588), group
  errors of TxnOffsetCommit (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID),
  TOPIC/GROUP_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE. UNKNOWN_PRODUCER_ID and
  INVALID_PRODUCER_ID_MAPPING also need a new epoch: the abort then ends with
  InitProducerId(id, producer id, epoch) (KIP-360), which restarts the sequences; so does a
  batch that failed after it was given sequence numbers (they would be a gap);
* **retriable**: CONCURRENT_TRANSACTIONS (the previous transaction is still completing),
  COORDINATOR_LOAD_IN_PROGRESS and other retriable codes: the same request again after
  ``retry_backoff_ms``; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (and a lost
  connection): find the coordinator again first. One exception (``retry_backoff_s``): a
  transaction's first AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS is retried after
  2 ms, then 4, 8, 16, at most 20 ms (or ``retry_backoff_ms`` if lower). Kafka's coordinator
  answers EndTxn once the outcome is logged, before the markers are written, so the next
  transaction's first AddPartitionsToTxn often arrives while they still are; it is clear
  within milliseconds, and the whole transaction waits for it. Kafka's producer retries that
  one after 20 ms; with the 100 ms default, a producer committing every 100 ms lost up to
  half its time there.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from .errors import KafkaError
from .idempotence import IdempotenceManager, SequencedBatch

__all__ = [
    "AbortableTransactionError",
    "FatalTransactionError",
    "Outcome",
    "ProducerFencedError",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionState",
    "TransactionStateError",
    "outcome",
    "retry_backoff_s",
]


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

# target state -> the states it may be entered from (Kafka's isTransitionValid); FATAL_ERROR
# may be entered from any state and is left by closing the producer.
_ENTERED_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR,
                                  S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TransactionState),
}


class TransactionStateError(RuntimeError):
    """A transactional call made in a state that does not allow it (Kafka's IllegalStateException)."""


class TransactionError(KafkaError):
    """A transaction failed; ``fatal`` says whether the producer can go on."""

    fatal = False


class FatalTransactionError(TransactionError):
    """The producer cannot make transactions any more: close it (and create a new one)."""

    fatal = True

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        super().__init__(code, message)
        self.retriable = False


class ProducerFencedError(FatalTransactionError):
    """Another producer with the same transactional id initialized after this one (a newer
    epoch): this one is a zombie and must close."""


class AbortableTransactionError(TransactionError):
    """The transaction cannot commit: call ``abort_transaction()``, then start a new one."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        super().__init__(code, message)
        self.retriable = False


class TransactionAbortedError(KafkaError):
    """A record's transaction was aborted before the record was sent (Kafka's
    TransactionAbortedException): it was never written."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.unknown_server_error, message)
        self.retriable = False


class Outcome(enum.Enum):
    """What an error answer to a transactional request means."""

    RETRY = "retry"  # the same request after retry_backoff_ms
    REDISCOVER = "rediscover"  # FindCoordinator again, then the same request
    ABORTABLE = "abortable"
    ABORTABLE_EPOCH_BUMP = "abortable, then a new epoch"  # Kafka's abortableErrorIfPossible
    FATAL = "fatal"
    FENCED = "fenced"


O = Outcome
E = ErrorCode

# What every coordinator request's answer means, before the per-request rules.
_COMMON: dict[ErrorCode, Outcome] = {
    E.not_coordinator: O.REDISCOVER,
    E.coordinator_not_available: O.REDISCOVER,
    E.producer_fenced: O.FENCED,
    E.invalid_producer_epoch: O.FENCED,  # an older coordinator's PRODUCER_FENCED
    E.transactional_id_authorization_failed: O.FATAL,
    E.cluster_authorization_failed: O.FATAL,
    E.unsupported_version: O.FATAL,
    E.transaction_abortable: O.ABORTABLE,
}
_NEW_EPOCH = {E.unknown_producer_id: O.ABORTABLE_EPOCH_BUMP, E.invalid_producer_id_mapping: O.ABORTABLE_EPOCH_BUMP}

# api -> (its own rules, the outcome of a non-retriable code no rule names)
_RULES: dict[str, tuple[dict[ErrorCode, Outcome], Outcome]] = {
    "find_coordinator": ({E.group_authorization_failed: O.ABORTABLE}, O.FATAL),
    "init_producer_id": ({}, O.FATAL),
    "add_partitions_to_txn": ({E.invalid_txn_state: O.FATAL, E.topic_authorization_failed: O.ABORTABLE,
                               E.operation_not_attempted: O.ABORTABLE, **_NEW_EPOCH}, O.ABORTABLE),
    "add_offsets_to_txn": ({E.invalid_txn_state: O.FATAL, E.group_authorization_failed: O.ABORTABLE, **_NEW_EPOCH},
                           O.FATAL),
    "txn_offset_commit": ({E.request_timed_out: O.REDISCOVER, E.group_authorization_failed: O.ABORTABLE,
                           E.fenced_instance_id: O.ABORTABLE, E.unknown_member_id: O.ABORTABLE,
                           E.illegal_generation: O.ABORTABLE, E.unsupported_for_message_format: O.FATAL},
                          O.FATAL),
    "end_txn": ({E.invalid_txn_state: O.FATAL, **_NEW_EPOCH}, O.FATAL),
}

# A Produce answer's error inside a transaction: these are fatal, any other abortable.
_FATAL_FOR_RECORDS = frozenset({E.producer_fenced, E.transactional_id_authorization_failed,
                                E.cluster_authorization_failed, E.unsupported_version})

# When one answer holds several errors (per partition), the gravest decides.
_GRAVITY = (O.FENCED, O.FATAL, O.ABORTABLE_EPOCH_BUMP, O.ABORTABLE, O.REDISCOVER, O.RETRY)


# A transaction's first AddPartitionsToTxn refused with CONCURRENT_TRANSACTIONS: the first
# retry's backoff, doubled on each retry up to the cap (see the module docstring).
FIRST_ADD_RETRY_BACKOFF_S = 0.002
FIRST_ADD_RETRY_BACKOFF_MAX_S = 0.02


def retry_backoff_s(api: str, code: ErrorCode, attempt: int, first_in_transaction: bool, default_s: float) -> float:
    """Seconds to wait before retrying ``api`` after the retriable ``code`` on its
    ``attempt``-th try (1 for the first): ``default_s`` (retry_backoff_ms), but for the
    first AddPartitionsToTxn of a transaction (``first_in_transaction``: no partition added
    yet) that heard CONCURRENT_TRANSACTIONS, 2 ms doubling to at most 20 ms."""
    if api == "add_partitions_to_txn" and code == E.concurrent_transactions and first_in_transaction:
        backoff = FIRST_ADD_RETRY_BACKOFF_S * 2 ** min(attempt - 1, 16)
        return min(backoff, FIRST_ADD_RETRY_BACKOFF_MAX_S, default_s)
    return default_s


def outcome(api: str, code: ErrorCode) -> Outcome:
    """What error ``code`` in an answer to ``api`` means (the module docstring's rules)."""
    own, default = _RULES[api]
    if code in own:
        return own[code]
    if code in _COMMON:
        return _COMMON[code]
    return O.RETRY if code.retriable else default


def gravest(outcomes: Iterable[Outcome]) -> Outcome | None:
    found = set(outcomes)
    return next((o for o in _GRAVITY if o in found), None)


class TransactionManager(IdempotenceManager):
    """The transactional state of one producer (see the module docstring)."""

    transactional = True

    def __init__(self, transactional_id: str, *, transaction_timeout_ms: int = 60_000) -> None:
        super().__init__(enabled=True, transaction_timeout_ms=transaction_timeout_ms)
        self.transactional_id = transactional_id
        self.state = S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.in_transaction: set[tuple[str, int]] = set()  # added to the transaction: may be produced to
        self.to_add: set[tuple[str, int]] = set()  # new in this transaction: AddPartitionsToTxn pending
        self.transaction_started = False  # the coordinator knows of it (a partition or offsets added)
        self.epoch_bump_required = False  # InitProducerId after the abort (KIP-360)
        # partitions new to the transaction with no batch acknowledged yet: send() yields every
        # few records
        self.starting_partitions: set[tuple[str, int]] = set()
        # partitions with a batch acknowledged under the current producer id and epoch: their
        # leader holds our last sequence (the others' first batch goes alone: sends_alone)
        self.acknowledged_in_epoch: set[tuple[str, int]] = set()
        # the partition check_send() passed last in this transaction: the next send() to it
        # needs no other check while the state stays IN_TRANSACTION (every move out of it
        # forgets it). check_send() runs once per record; the full check cost several times more.
        self._passed_topic: str | None = None
        self._passed_partition = -1
        # The same partition while no partition of the transaction is starting: a send() to it
        # needs neither the check nor the yield every few records, so Producer.send() takes
        # its fast path (no coroutine) as for an idempotent producer; None otherwise. The
        # coroutine cost about 0.3 us of the 1.4-1.7 us a send() took (README, bench_txn).
        self.fast_topic: str | None = None
        self.fast_partition = -1
        # Called whenever fast_topic goes back to None: the producer stops its C send path
        # (records.encoding.SendPath), which appends to the partition it was armed for with no
        # check of the transaction, so it may run only while that partition passes them.
        self.fast_path_lost: Callable[[], None] = _nothing

    # ------------------------------------------------------------ states

    def transition(self, target: TransactionState, error: BaseException | None = None) -> None:
        if self.state not in _ENTERED_FROM[target]:
            raise TransactionStateError(f"cannot move from {self.state.value} to {target.value}")
        self.state = target
        if target is not S.IN_TRANSACTION:
            self._passed_topic = None
            self._no_fast_path()
        if error is not None:
            self.last_error = error
        elif target in (S.INITIALIZING, S.READY, S.IN_TRANSACTION):
            self.last_error = None

    def require(self, what: str, *states: TransactionState) -> None:
        """Raise unless the state is one of ``states``: the fatal error itself once fatal,
        else a TransactionStateError that says what to do."""
        if self.state in states:
            return
        if self.state is S.FATAL_ERROR and isinstance(self.last_error, KafkaError):
            raise _again(self.last_error)
        hint = {
            S.UNINITIALIZED: "call init_transactions() first",
            S.READY: "call begin_transaction() first",
            S.IN_TRANSACTION: "commit_transaction() or abort_transaction() first",
            S.ABORTABLE_ERROR: f"the transaction failed ({self.last_error}); call abort_transaction()",
            S.COMMITTING_TRANSACTION: "the transaction is being committed",
            S.ABORTING_TRANSACTION: "the transaction is being aborted",
        }.get(self.state, "")
        raise TransactionStateError(f"cannot {what} in state {self.state.value}" + (f": {hint}" if hint else ""))

    def fail(self, result: Outcome, error: KafkaError) -> KafkaError:
        """Enter the error state ``result`` calls for; return the error to raise."""
        if result is O.FENCED:
            error = ProducerFencedError(E.producer_fenced, (
                f"PRODUCER_FENCED: another producer with transactional_id={self.transactional_id!r} "
                f"initialized after this one ({error}); close this producer"))
        if result in (O.FENCED, O.FATAL):
            if not isinstance(error, FatalTransactionError):
                error = FatalTransactionError(error.code, f"{error}; the producer cannot go on: close it")
            self.transition(S.FATAL_ERROR, error)
            return error
        if result is O.ABORTABLE_EPOCH_BUMP:
            self.epoch_bump_required = True
        if not isinstance(error, AbortableTransactionError):
            error = AbortableTransactionError(error.code, f"{error}; call abort_transaction()")
        if self.state in _ENTERED_FROM[S.ABORTABLE_ERROR]:
            self.transition(S.ABORTABLE_ERROR, error)
        # else already aborting (or fatal): the error changes nothing, as in Kafka
        return error

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    def unsent_batches_fail_with(self) -> BaseException | None:
        """While the transaction is failing or aborting, batches not sent yet fail at once
        with this (Kafka's abortUndrainedBatches); None otherwise."""
        if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            return self.last_error or TransactionAbortedError("the transaction failed before the record was sent")
        if self.state is S.ABORTING_TRANSACTION:
            return TransactionAbortedError("the transaction was aborted before the record was sent")
        return None

    # ------------------------------------------------------------ the transaction

    def begin(self) -> None:
        self.require("begin_transaction()", S.READY)
        self.transition(S.IN_TRANSACTION)

    def check_send(self, topic: str, partition: int) -> None:
        """send() to ``topic``-``partition``: allowed only in a transaction, and a partition new
        to it is added (AddPartitionsToTxn before its first batch goes)."""
        if partition == self._passed_partition and topic is self._passed_topic:
            return  # the common case: the partition of the last send(), passed in this transaction
        state = self.state
        if state is not S.IN_TRANSACTION:
            if state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) and isinstance(self.last_error, KafkaError):
                raise _again(self.last_error)
            self.require("send()", S.IN_TRANSACTION)
        key = (topic, partition)
        if key not in self.in_transaction:
            self.to_add.add(key)
            self.starting_partitions.add(key)
        self._passed_topic, self._passed_partition = topic, partition
        self._update_fast_path()

    def _no_fast_path(self) -> None:
        """The one way fast_topic goes back to None: the producer's C send path stops with it."""
        self.fast_topic = None
        self.fast_path_lost()

    def _update_fast_path(self) -> None:
        if self.starting_partitions:
            self._no_fast_path()
        else:
            self.fast_topic, self.fast_partition = self._passed_topic, self._passed_partition

    def partitions_to_add(self) -> list[tuple[str, int]]:
        """The partitions to put in the next AddPartitionsToTxn (none while an error stands)."""
        if not self.to_add or self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            return []
        return sorted(self.to_add)

    def partitions_added(self, partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn succeeded (commit and abort wait for it, so the transaction it
        belongs to is still the current one)."""
        for key in partitions:
            self.to_add.discard(key)
            self.in_transaction.add(key)
        self.transaction_started = True

    def offsets_added(self) -> None:
        self.transaction_started = True

    def may_produce_to(self, key: tuple[str, int]) -> bool:
        return key in self.in_transaction

    def batch_acknowledged(self, key: tuple[str, int]) -> None:
        """A Produce answer acknowledged a batch of partition ``key``: its pipeline runs, and
        once every new partition's does, ``send()`` goes back to yielding once per batch."""
        if self.starting_partitions:
            self.starting_partitions.discard(key)
            if not self.starting_partitions and self.state is S.IN_TRANSACTION:
                self._update_fast_path()
        self.acknowledged_in_epoch.add(key)

    def sends_alone(self, key: tuple[str, int]) -> bool:
        """Does partition ``key``'s next batch wait until those in flight are answered? Yes
        until one batch of the current epoch is acknowledged there (the module docstring)."""
        return key not in self.acknowledged_in_epoch

    def start_commit(self) -> None:
        if self.state is S.COMMITTING_TRANSACTION:
            return  # a commit that timed out, called again
        self.require("commit_transaction()", S.IN_TRANSACTION)
        self.transition(S.COMMITTING_TRANSACTION)

    def start_abort(self) -> None:
        if self.state is S.ABORTING_TRANSACTION:
            return
        self.require("abort_transaction()", S.IN_TRANSACTION, S.ABORTABLE_ERROR)
        self.transition(S.ABORTING_TRANSACTION)

    def completed(self) -> None:
        """EndTxn succeeded (or the transaction was empty): ready for the next one."""
        self.forget_transaction()
        self.transition(S.READY)

    def forget_transaction(self) -> None:
        self.in_transaction.clear()
        self.to_add.clear()
        self.transaction_started = False
        self.starting_partitions.clear()
        self._passed_topic = None
        self._no_fast_path()

    # ------------------------------------------------------------ InitProducerId

    def init_producer_id_request(self) -> tuple[int, int, dict[str, Any]]:
        """InitProducerId with the transactional id: a new epoch of the id's producer at start
        (the coordinator fences the previous instance), or after an abort that needs a new
        epoch, the next one of ours (KIP-360: v3+, with our id and epoch)."""
        bump = self.epoch_bump_required and self.producer_id_and_epoch.is_valid
        pe = self.producer_id_and_epoch if bump else None
        return (3 if bump else 0), 4, {
            "transactional_id": self.transactional_id, "transaction_timeout": self.transaction_timeout_ms,
            "producer_id": pe.producer_id if pe else -1, "producer_epoch": pe.epoch if pe else -1}

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int,
                                  waiting: Iterable[SequencedBatch] = ()) -> None:
        super().set_producer_id_and_epoch(producer_id, epoch, waiting)
        self.epoch_bump_required = False
        self.acknowledged_in_epoch.clear()  # sequence 0 again: the leaders may take any

    # ------------------------------------------------------------ what the sender asks

    def may_send(self) -> bool:
        # the sender never bumps a transactional producer's epoch itself: the abort does
        return True

    def batch_failed(self, batch: SequencedBatch, *, closing: bool = False,
                     error: BaseException | None = None) -> None:
        """A record batch failed for good: fatal for a fenced producer, else the transaction
        must abort (and if the batch had sequences, the abort takes a new epoch)."""
        if closing:
            return
        if batch.wire is not None:
            # Its sequences were taken and will never be written: every later batch of the
            # partition would be refused as out of order. That holds for a batch the abort
            # drops too (a sealed batch waiting for its retry), so the abort takes a new epoch.
            self.epoch_bump_required = True
        if isinstance(error, TransactionAbortedError):
            return  # failed by the abort itself
        code = error.code if isinstance(error, KafkaError) else None
        if code in _FATAL_FOR_RECORDS:
            self.fail(O.FENCED if code == E.producer_fenced else O.FATAL,
                      error if isinstance(error, KafkaError) else KafkaError(E.unknown_server_error, str(error)))
        elif self.state in _ENTERED_FROM[S.ABORTABLE_ERROR]:
            wrapped = error if isinstance(error, KafkaError) else KafkaError(E.unknown_server_error, repr(error))
            self.fail(O.ABORTABLE, AbortableTransactionError(
                wrapped.code, f"a record of the transaction failed ({error}); call abort_transaction()"))

    def out_of_order_retriable(self, earlier_unacknowledged: bool) -> bool:
        return earlier_unacknowledged


def _nothing() -> None:
    """fast_path_lost of a manager no producer listens to."""


def _again(error: KafkaError) -> KafkaError:
    """A fresh exception like ``error`` (raising one instance from many places chains tracebacks)."""
    again = type(error).__new__(type(error))
    again.__dict__.update(error.__dict__)
    again.args = error.args
    return again
