"""The transaction state machine, in one table (after h11's ``_state.py``).

States (Kafka's names and the ids ``__transaction_state`` stores)::

    Empty              0  a producer id and epoch, no transaction in progress
    Ongoing            1  partitions (or a group's offsets) were added: a transaction is open
    PrepareCommit      2  EndTxn(commit) is logged: the outcome is decided, markers are being written
    PrepareAbort       3  EndTxn(abort), a fence or a timeout is logged: abort markers are being written
    CompleteCommit     4  every partition has its commit marker
    CompleteAbort      5  every partition has its abort marker
    Dead               6  the transactional id expired (transactional.id.expiration.ms): forgotten
    PrepareEpochFence  7  in memory only: the epoch was bumped to fence the producer, an abort follows

Rules:

* A state change is logged to ``__transaction_state`` before it takes effect (``WRITE_STATE``);
  a crash after PrepareCommit / PrepareAbort is logged still ends in the decided outcome, since
  loading the log resumes the markers.
* InitProducerId with no transaction in flight starts a new epoch (``NEW_EPOCH``). With one
  Ongoing it fences: the epoch goes up (``FENCE_EPOCH``), the transaction is aborted with the
  new epoch, and the client hears CONCURRENT_TRANSACTIONS and retries (Kafka's way).
* An expired transaction (``transaction.timeout.ms``) is fenced and aborted the same way.
* Requests that arrive while markers are being written answer CONCURRENT_TRANSACTIONS; a retried
  EndTxn whose outcome is already complete answers NONE. Those answers are in the table too
  (``next`` is None: no transition, nothing logged).

A pair missing from the table raises IllegalTransitionError, naming the state and the event;
the coordinator answers a client's request that does so with INVALID_TXN_STATE, as Kafka.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Effect", "Event", "IllegalTransitionError", "Step", "TxnState", "step"]


class TxnState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> "TxnState":
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> "TxnState | None":
        for state in cls:
            if state.kafka_name == name:
                return state
        return None


class Event(enum.Enum):
    INIT = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn or AddOffsetsToTxn"
    COMMIT = "EndTxn(commit)"
    ABORT = "EndTxn(abort), or the coordinator aborting"
    TIMEOUT = "transaction.timeout.ms passed"
    MARKERS_WRITTEN = "every partition has its marker"
    EXPIRE = "transactional.id.expiration.ms passed"


class Effect(enum.Enum):
    NEW_EPOCH = "the producer gets the next epoch (a new producer id once the epoch is exhausted)"
    FENCE_EPOCH = "the epoch goes up to fence the producer; it is never returned to a client"
    START = "the transaction's start time is now"
    ADD_PARTITIONS = "the request's partitions join the transaction"
    CLEAR_PARTITIONS = "the transaction has no partitions any more"
    WRITE_STATE = "the new state is appended to __transaction_state before it takes effect"
    WRITE_TOMBSTONE = "the transactional id's key gets a tombstone in __transaction_state"
    WRITE_MARKERS = "a commit or abort marker goes to every partition of the transaction"
    THEN_ABORT = "the coordinator aborts the transaction right away (event ABORT)"


class IllegalTransitionError(RuntimeError):
    def __init__(self, state: TxnState, event: Event) -> None:
        super().__init__(f"a transaction in state {state.kafka_name} cannot take the event: {event.value}")
        self.state, self.event = state, event


@dataclass(frozen=True, slots=True)
class Step:
    """What an event does in a state: the next state (None: stay, nothing logged), the effects
    in order, and the error code the request answers (a Kafka error name; "none" for success)."""

    next: TxnState | None
    effects: tuple[Effect, ...] = ()
    answer: str = "none"


S, E, X = TxnState, Event, Effect
_NEW_EPOCH = Step(S.EMPTY, (X.NEW_EPOCH, X.CLEAR_PARTITIONS, X.WRITE_STATE))
_BEGIN = Step(S.ONGOING, (X.START, X.ADD_PARTITIONS, X.WRITE_STATE))
_FENCE = Step(S.PREPARE_EPOCH_FENCE, (X.FENCE_EPOCH, X.THEN_ABORT), "concurrent_transactions")
_RETRY_LATER = Step(None, (), "concurrent_transactions")
_DONE_ALREADY = Step(None, (), "none")
_EXPIRE = Step(S.DEAD, (X.WRITE_TOMBSTONE,))

_TABLE: dict[tuple[TxnState, Event], Step] = {
    (S.EMPTY, E.INIT): _NEW_EPOCH,
    (S.COMPLETE_COMMIT, E.INIT): _NEW_EPOCH,
    (S.COMPLETE_ABORT, E.INIT): _NEW_EPOCH,
    (S.ONGOING, E.INIT): _FENCE,
    (S.PREPARE_COMMIT, E.INIT): _RETRY_LATER,
    (S.PREPARE_ABORT, E.INIT): _RETRY_LATER,

    (S.EMPTY, E.ADD_PARTITIONS): _BEGIN,
    (S.COMPLETE_COMMIT, E.ADD_PARTITIONS): _BEGIN,
    (S.COMPLETE_ABORT, E.ADD_PARTITIONS): _BEGIN,
    (S.ONGOING, E.ADD_PARTITIONS): Step(S.ONGOING, (X.ADD_PARTITIONS, X.WRITE_STATE)),
    (S.PREPARE_COMMIT, E.ADD_PARTITIONS): _RETRY_LATER,
    (S.PREPARE_ABORT, E.ADD_PARTITIONS): _RETRY_LATER,

    (S.ONGOING, E.COMMIT): Step(S.PREPARE_COMMIT, (X.WRITE_STATE, X.WRITE_MARKERS)),
    (S.PREPARE_COMMIT, E.COMMIT): _RETRY_LATER,
    (S.COMPLETE_COMMIT, E.COMMIT): _DONE_ALREADY,
    (S.ONGOING, E.ABORT): Step(S.PREPARE_ABORT, (X.WRITE_STATE, X.WRITE_MARKERS)),
    (S.PREPARE_EPOCH_FENCE, E.ABORT): Step(S.PREPARE_ABORT, (X.WRITE_STATE, X.WRITE_MARKERS)),
    (S.PREPARE_ABORT, E.ABORT): _RETRY_LATER,
    (S.COMPLETE_ABORT, E.ABORT): _DONE_ALREADY,
    (S.ONGOING, E.TIMEOUT): _FENCE,

    (S.PREPARE_COMMIT, E.MARKERS_WRITTEN): Step(S.COMPLETE_COMMIT, (X.CLEAR_PARTITIONS, X.WRITE_STATE)),
    (S.PREPARE_ABORT, E.MARKERS_WRITTEN): Step(S.COMPLETE_ABORT, (X.CLEAR_PARTITIONS, X.WRITE_STATE)),

    (S.EMPTY, E.EXPIRE): _EXPIRE,
    (S.COMPLETE_COMMIT, E.EXPIRE): _EXPIRE,
    (S.COMPLETE_ABORT, E.EXPIRE): _EXPIRE,
}


def step(state: TxnState, event: Event) -> Step:
    try:
        return _TABLE[(state, event)]
    except KeyError:
        raise IllegalTransitionError(state, event) from None
