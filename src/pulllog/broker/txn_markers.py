"""Transaction markers: the broker side of a transaction's second phase.

:func:`write_txn_markers` appends one control batch (commit or abort, Kafka's format, see
records/control.py) to each partition of a transaction and says how each went, with Kafka's
error codes. The transaction coordinator calls it through its ``TxnMarkerWriter`` (bound to
this broker), and so does the WriteTxnMarkers handler (27), which kafka-transactions.sh's
``abort`` uses. For the ``__consumer_offsets`` partitions among them, once their marker is
written, the group coordinator makes the transaction's offsets committed or drops them.

Rules:

* A cluster member writes only to the partitions it leads (NOT_LEADER_OR_FOLLOWER for the
  others; the coordinator's sender, txn_marker_sender.py, sends those to their leaders).
* Each partition stands alone: one partition's error does not keep the others from their
  markers. A partition that does not exist (its topic was deleted) answers
  UNKNOWN_TOPIC_OR_PARTITION; a storage error KAFKA_STORAGE_ERROR (the coordinator retries it).
* An epoch older than the one the partition's log holds is refused: INVALID_PRODUCER_EPOCH for
  the producer's, TRANSACTION_COORDINATOR_FENCED for the coordinator's.
* Writing a marker moves the partition's last stable offset: fetches waiting on the partition
  are woken, as after an append.
* A marker that makes the partition's ``flush.messages`` due is not fsynced here (the event
  loop never waits for the disk): the log goes to ``BrokerApi.defer_flush``, and the request
  that wrote it (EndTxn, WriteTxnMarkers) answers once that fsync is done
  (``BrokerApi.collect_flushes``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..group.coordinator import OFFSETS_TOPIC
from ..log.producer_state import InvalidProducerEpochError, TransactionCoordinatorFencedError
from .topics import PartitionError

if TYPE_CHECKING:
    from .api import BrokerApi

__all__ = ["write_txn_markers"]

log = logging.getLogger("pulllog.broker.txn_markers")


def write_txn_markers(broker: "BrokerApi", producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int,
                      partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    results: dict[tuple[str, int], ErrorCode] = {}
    offsets_partitions: list[int] = []
    for topic, index in partitions:
        results[(topic, index)] = code = _write_one(broker, topic, index, producer_id, producer_epoch, commit,
                                                    coordinator_epoch)
        if code == ErrorCode.none and topic == OFFSETS_TOPIC:
            offsets_partitions.append(index)
    if offsets_partitions:
        broker.groups.handle_txn_completion(producer_id, offsets_partitions, commit)
    return results


def _write_one(broker: "BrokerApi", topic: str, index: int, producer_id: int, producer_epoch: int, commit: bool,
               coordinator_epoch: int) -> ErrorCode:
    # A cluster member writes markers only where it leads (NOT_LEADER_OR_FOLLOWER elsewhere:
    # the coordinator sends them to the leader); a single broker leads every partition.
    replicas = broker.replicas
    partition_log = replicas.leader_log(topic, index) if replicas is not None else broker.partition(topic, index)
    if isinstance(partition_log, PartitionError):
        return ErrorCode(partition_log.code)
    try:
        partition_log.write_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, defer_flush=True)
    except TransactionCoordinatorFencedError as exc:
        log.warning("marker for producer %d on %s-%d refused: %s", producer_id, topic, index, exc)
        return ErrorCode.transaction_coordinator_fenced
    except InvalidProducerEpochError as exc:
        log.warning("marker for producer %d on %s-%d refused: %s", producer_id, topic, index, exc)
        return ErrorCode.invalid_producer_epoch
    except OSError as exc:
        log.error("marker for producer %d on %s-%d failed: %s", producer_id, topic, index, exc)
        return ErrorCode.kafka_storage_error
    broker.on_append(topic, index)
    if partition_log.flush_messages_due:
        broker.defer_flush(partition_log)
    if replicas is not None:  # answered once the ISR has the marker (Kafka appends it with acks=all)
        broker.wait_for_replication(topic, index, partition_log)
    return ErrorCode.none
