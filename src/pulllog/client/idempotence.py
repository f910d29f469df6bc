"""The idempotent producer's state: producer id and epoch, sequence numbers, epoch bumps.

``IdempotenceManager`` is the idempotent half of Kafka's TransactionManager, and like it
does no I/O: it decides, and the sender (``pulllog.client.sender``) sends the
InitProducerId requests it asks for and feeds the answers back. Transactions (a
transactional id, the transaction states, AddPartitionsToTxn, EndTxn) are its subclass
``TransactionManager`` (``pulllog.client.transactions``), which keeps this state and these
rules.

What it keeps, and the rules:

* **Producer id and epoch** (``ProducerIdAndEpoch``): from InitProducerId at start; every
  batch carries them. ``NO_PRODUCER_ID`` (-1, -1) when idempotence is off.
* **Sequences.** Each partition counts records from 0 under each epoch; a batch's base
  sequence is the partition's count when the batch is first sent (sealed), and a retry
  keeps it, so the broker recognises a resent batch and stores it once. Sequences wrap at
  2**31 as Kafka's do.
* **A batch that fails for good** after it was sealed leaves a gap in its partition's
  sequences, which the broker would refuse every later batch of the partition for
  (OUT_OF_ORDER_SEQUENCE_NUMBER). KIP-360: the producer then sends nothing more under
  this epoch; once every request in flight is answered it asks InitProducerId (v3+) with
  its current id and epoch for the next epoch, every partition starts again at sequence
  0, and the sealed batches waiting for a retry are restamped, per partition in their
  order. Records keep their send order; only the failed batch is missing. A broker too
  old for that leaves the producer on its epoch (later batches may then fail too).
* **OUT_OF_ORDER_SEQUENCE_NUMBER** is retriable while an earlier batch of the partition
  is unacknowledged (that batch is the gap the broker saw) or an epoch bump is pending;
  otherwise the broker's sequence no longer matches ours and the batch fails.
* **A retry** keeps its sequences and goes with the partition's whole in-flight window,
  as first sends do, once every earlier batch of the partition in flight is on the
  connection the retry will take: a broker handles a connection's requests in order and a
  connection that fails fails them all, so order holds (an earlier batch that fails makes
  the later ones OUT_OF_ORDER_SEQUENCE_NUMBER, retriable, and all go again in order). An
  earlier batch still on a connection that failed must come back first. (Kafka's producer
  sends a partition's retries one at a time until caught up; this recovers at full speed.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["NO_PRODUCER_ID", "IdempotenceManager", "ProducerIdAndEpoch", "SequencedBatch"]

_SEQUENCE_MODULUS = 2**31  # sequences are int32 and wrap to 0, as in Kafka


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """Who the broker thinks is producing: the id from InitProducerId and its epoch."""

    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


NO_PRODUCER_ID = ProducerIdAndEpoch(-1, -1)


class SequencedBatch(Protocol):
    """What the manager needs of a batch (``ProducerBatch`` is one): where it goes, how many
    records, whether it is sealed (``wire``), and how to restamp it under a new epoch."""

    topic: str
    partition: int
    wire: bytes | None

    @property
    def count(self) -> int: ...  # records in the batch

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...


class IdempotenceManager:
    """Producer id, epoch and per-partition sequences of one idempotent producer (the module
    docstring has the rules). With ``enabled=False`` it stamps every batch with -1s and
    never asks for an epoch bump, so the sender needs no second code path."""

    transactional = False  # TransactionManager (pulllog.client.transactions) is the transactional one

    def __init__(self, *, enabled: bool, transaction_timeout_ms: int = 60_000) -> None:
        self.enabled = enabled
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id_and_epoch = NO_PRODUCER_ID
        self._next_sequence: dict[tuple[str, int], int] = {}
        # a sealed batch failed for good: send nothing under this epoch; take the next one
        self._epoch_bump_needed = False

    # ------------------------------------------------------------ producer id and epoch

    @property
    def producer_id(self) -> int:
        return self.producer_id_and_epoch.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.producer_id_and_epoch.epoch

    @property
    def epoch_bump_needed(self) -> bool:
        return self._epoch_bump_needed

    def init_producer_id_request(self) -> tuple[int, int, dict[str, Any]]:
        """(lowest version, highest version, request data) of the InitProducerId to send now:
        a new producer id at start (v0+), or the next epoch of ours after a batch failed for
        good (KIP-360: v3+, with our id and epoch)."""
        if self._epoch_bump_needed and self.producer_id_and_epoch.is_valid:
            current, lowest = self.producer_id_and_epoch, 3
        else:
            current, lowest = NO_PRODUCER_ID, 0
        return lowest, 4, {"transactional_id": None, "transaction_timeout": self.transaction_timeout_ms,
                           "producer_id": current.producer_id, "producer_epoch": current.epoch}

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int,
                                  waiting: Iterable[SequencedBatch] = ()) -> None:
        """InitProducerId answered: every partition starts again at sequence 0 under the new
        id and epoch, and the sealed batches in ``waiting`` (those waiting for a retry, each
        partition's in their order; unsealed ones get theirs when first sent) are restamped."""
        self.producer_id_and_epoch = ProducerIdAndEpoch(producer_id, epoch)
        self._next_sequence.clear()
        self._epoch_bump_needed = False
        for batch in waiting:
            if batch.wire is not None:
                batch.restamp(producer_id, epoch, self._take_sequence(batch))

    def epoch_bump_unsupported(self) -> None:
        """The broker cannot give the next epoch (InitProducerId below v3): go on under this one."""
        self._epoch_bump_needed = False

    # ------------------------------------------------------------ what the sender asks

    def may_send(self) -> bool:
        """May batches be sent now? Not while an epoch bump is pending: they would carry
        sequences after the gap, under the epoch about to end."""
        return not self._epoch_bump_needed

    def may_send_retry(self, attempts: int, earlier_elsewhere: bool) -> bool:
        """A retried batch waits while an earlier batch of its partition is in flight on
        another connection than the one it would take (``earlier_elsewhere``)."""
        return not (self.enabled and attempts and earlier_elsewhere)

    def stamp(self, batch: SequencedBatch) -> tuple[int, int, int]:
        """(producer id, epoch, base sequence) to seal ``batch`` with on its first send; with
        idempotence it takes the partition's next ``batch.count`` sequence numbers."""
        if not self.enabled:
            return -1, -1, -1
        pe = self.producer_id_and_epoch
        return pe.producer_id, pe.epoch, self._take_sequence(batch)

    def next_sequence(self, topic: str, partition: int) -> int:
        return self._next_sequence.get((topic, partition), 0)

    def _take_sequence(self, batch: SequencedBatch) -> int:
        key = (batch.topic, batch.partition)
        sequence = self._next_sequence.get(key, 0)
        self._next_sequence[key] = (sequence + batch.count) % _SEQUENCE_MODULUS
        return sequence

    # ------------------------------------------------------------ what answers mean

    def batch_failed(self, batch: SequencedBatch, *, closing: bool = False,
                     error: BaseException | None = None) -> None:
        """``batch`` failed for good. If it was sealed, its sequences will never be written:
        a gap every later batch of its partition would be refused for, so the epoch must
        change (not when the producer is closing: nothing is sent after)."""
        if self.enabled and batch.wire is not None and not closing:
            self._epoch_bump_needed = True

    def out_of_order_retriable(self, earlier_unacknowledged: bool) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER: retry while an earlier batch of the partition is
        unacknowledged (the broker saw that gap) or the epoch is about to change."""
        return earlier_unacknowledged or self._epoch_bump_needed
