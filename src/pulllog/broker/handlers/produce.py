"""Produce (0): validate every batch of a partition, then append; acks 0, 1 and -1.

Each partition stands alone, as in Kafka: a bad batch for one partition fails that
partition with its error code and leaves the others of the request unharmed. Nothing of a
partition's records is appended unless all of its batches are valid. With one replica,
acks=-1 is satisfied as soon as the append returns (the high watermark is the log end
offset); on a cluster member it waits in the produce purgatory until the high watermark
passes the records (broker/replica_manager.py), and a partition not led here answers
NOT_LEADER_OR_FOLLOWER.

The answer is encoded by hand (``pulllog.net.produce``), not through kio: a producer that
sends one record per request makes this the broker's most frequent response. For the same
reason the handler is a plain function: it never waits, so the server runs it as soon as
the request's bytes arrive (see ``pulllog.broker.server``), and it ``holds_answer``: while
more requests of the connection are queued, its answer waits to go out with theirs in one
write.

``flush.messages``: as in Kafka, records that make a partition's flush due are acknowledged
only once they are on disk. The append does not fsync (that would stall the event loop for
the disk's time): the handler asks the broker's flusher to fsync the partitions that are
due on a worker thread and answers with a :class:`~pulllog.broker.handlers.Deferred`,
which gives the answer once those flushes are done (requests arriving meanwhile share the
next flush). A partition whose fsync fails answers KAFKA_STORAGE_ERROR: its records stay
in the log, unacknowledged and counted as unflushed, so a retry is flushed again (an
idempotent producer's retry is answered with the original offsets once it is on disk).
With acks=0 the flush runs all the same, and nothing waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ...log import RecordErrors
from ...net.apis import ApiKey
from ...net.produce import PartitionProduceResponse, TopicProduceResponse, encode_produce_response
from ...records import InvalidRecordError
from ...records.batch import CONTROL_MASK, TRANSACTIONAL_MASK
from ..topics import INTERNAL_TOPICS, InvalidTopicError, PartitionError, validate_topic_name
from . import Deferred, RequestContext, handler
from .errors import error_code_for

if TYPE_CHECKING:
    import asyncio

    from ...log import Log
    from ...records.batch import BatchHeader
    from ..api import BrokerApi
    from ..flusher import FlushResult

log = logging.getLogger(__name__)
_new_tuple = tuple.__new__  # a named tuple from all its fields, without its Python __new__


def _partition_error(index: int, code: ErrorCode, message: str | None = None,
                     record_errors: Sequence[tuple[int, str | None]] = ()) -> PartitionProduceResponse:
    return PartitionProduceResponse(index, code.value, record_errors=record_errors, error_message=message)


@handler(ApiKey.PRODUCE, 3, 9, encode=encode_produce_response, holds_answer=True)
def handle(broker: "BrokerApi", ctx: RequestContext) -> list[TopicProduceResponse] | Deferred | None:
    body = ctx.body
    acks = body.acks
    responses = []
    if acks not in (0, 1, -1):
        for topic in body.topic_data:
            responses.append(TopicProduceResponse(topic.name, [
                _partition_error(p.index, ErrorCode.invalid_required_acks) for p in topic.partition_data]))
        return responses
    flushes: list[tuple[str, int, Log]] = []  # partitions whose answer waits for their fsync
    replicas = broker.replicas  # None for a single broker: acks=all needs nobody else
    acks_all: list[tuple[str, int, int]] | None = [] if replicas is not None and acks == -1 else None
    for topic_data in body.topic_data:
        name = topic_data.name
        if name in INTERNAL_TOPICS and broker.topics.find(name) is not None:
            # As Kafka's ReplicaManager: only the broker appends to its internal topics.
            responses.append(TopicProduceResponse(name, [
                _partition_error(p.index, ErrorCode.invalid_topic_exception,
                                 f"{name} is an internal topic: clients cannot produce to it")
                for p in topic_data.partition_data]))
            continue
        partitions = []  # (a loop, not a comprehension, and the tuple without its Python __new__: per request)
        for p in topic_data.partition_data:
            partitions.append(append_partition(broker, name, p.index, p.records, flushes, body.transactional_id,
                                               acks, acks_all))
        responses.append(_new_tuple(TopicProduceResponse, (name, partitions)))
    if acks_all:
        assert replicas is not None
        op = replicas.wait_for_acks(body.timeout_ms, acks_all)
        waits = broker.flush_logs([partition_log for _t, _i, partition_log in flushes]) if flushes else []
        return Deferred(_answer_after_replication, responses, flushes, waits, op.result,
                        waits_for=[*waits, op.result])
    if flushes:
        waits = broker.flush_logs([partition_log for _t, _i, partition_log in flushes])
        if acks != 0:
            return Deferred(_answer_after_flush, responses, flushes, waits, waits_for=waits)
    if acks == 0:
        return None
    return responses


def _unverified(broker: "BrokerApi", transactional_id: str, topic_name: str, index: int,
                header: "BatchHeader") -> PartitionProduceResponse | None:
    """Kafka 4's check of a transactional batch (KIP-890 part 1, transaction.partition.
    verification.enable): the partition must be in the producer's ongoing transaction, or a
    hanging transaction could hold the partition's LSO back for ever. Kafka's answers to
    Produce below v11: INVALID_TXN_STATE for a partition not added, INVALID_PRODUCER_EPOCH for
    a fenced producer, NOT_ENOUGH_REPLICAS (which older clients retry) while the transaction
    is being completed."""
    if not broker.config.transaction_partition_verification_enable:
        return None
    if broker.transactions.ownership_error(transactional_id) != ErrorCode.none:
        # A cluster member that is not the id's coordinator: Kafka asks the coordinator
        # (AddPartitionsToTxn, verify only); pulllog does not yet, and lets the batch in.
        return None
    code = broker.transactions.verify(transactional_id, header.producer_id, header.producer_epoch,
                                      ((topic_name, index),))[(topic_name, index)]
    if code == ErrorCode.none:
        return None
    if code in (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state):
        return _partition_error(index, ErrorCode.invalid_txn_state,
                                "the partition was not added to the transaction (AddPartitionsToTxn)")
    if code == ErrorCode.producer_fenced:
        return _partition_error(index, ErrorCode.invalid_producer_epoch, "the producer's epoch is fenced")
    if code in (ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator):
        return _partition_error(index, ErrorCode.not_enough_replicas,
                                f"unable to verify the partition is in the transaction: {code.name}")
    return _partition_error(index, code)


async def _answer_after_flush(responses: list[TopicProduceResponse], flushes: list[tuple[str, int, "Log"]],
                              waits: "list[asyncio.Future[FlushResult]]") -> list[TopicProduceResponse]:
    """The answer once every partition's flush is done; a failed fsync fails its partition."""
    failed: dict[tuple[str, int], OSError] = {}
    for (name, index, _log), wait in zip(flushes, waits):
        error = await wait
        if error is not None:
            log.error("flush of %s-%d failed: %s; answering KAFKA_STORAGE_ERROR", name, index, error)
            failed[(name, index)] = error
    if not failed:
        return responses
    return [TopicProduceResponse(topic.name, [
        _partition_error(p.index, ErrorCode.kafka_storage_error, f"storage error: {failed[key].strerror}")
        if (key := (topic.name, p.index)) in failed else p
        for p in topic.partitions]) for topic in responses]


async def _answer_after_replication(
        responses: list[TopicProduceResponse], flushes: list[tuple[str, int, "Log"]],
        waits: "list[asyncio.Future[FlushResult]]",
        replicated: "asyncio.Future[dict[tuple[str, int], ErrorCode]]") -> list[TopicProduceResponse]:
    """acks=all on a cluster member: the answer once the flushes are done and the high
    watermark passed every partition's records (or the request's timeout came)."""
    if flushes:
        responses = await _answer_after_flush(responses, flushes, waits)
    codes = await replicated
    failed = {key: code for key, code in codes.items() if code != ErrorCode.none}
    if not failed:
        return responses
    return [TopicProduceResponse(topic.name, [
        _partition_error(p.index, failed[key], f"acks=all: {failed[key].name}")
        if (key := (topic.name, p.index)) in failed and p.error_code == 0 else p
        for p in topic.partitions]) for topic in responses]


def append_partition(broker: "BrokerApi", topic_name: str, index: int, records: bytes | None,
                     flushes: list[tuple[str, int, "Log"]], transactional_id: str | None = None,
                     acks: int = 1, acks_all: list[tuple[str, int, int]] | None = None) -> PartitionProduceResponse:
    """Validate and append one partition's records; a partition whose flush.messages is due
    joins ``flushes`` (its answer waits for the fsync). A cluster member's partition must be
    led here; with acks=all (``acks_all`` given) it joins ``acks_all`` as (topic, partition,
    offset the high watermark must reach)."""
    replicas = broker.replicas
    partition_log = broker.partition(topic_name, index) if replicas is None else \
        replicas.produce_log(topic_name, index, acks)
    if isinstance(partition_log, PartitionError):
        # As Kafka: only Metadata creates topics (auto.create.topics.enable). Every
        # producer asks for metadata before it sends, and retries this error after it.
        try:
            validate_topic_name(topic_name)
        except InvalidTopicError as exc:
            return _partition_error(index, error_code_for(exc), str(exc))
        return _partition_error(index, partition_log.code, partition_log.message)
    if not records:
        return _partition_error(index, ErrorCode.corrupt_message, "the request carries no records for this partition")
    try:
        batches = partition_log.validate(records)
        control = empty = False
        for _pos, header in batches:  # one pass, read once: this runs with every request
            control = control or bool(header.attributes & CONTROL_MASK)
            empty = empty or header.records_count == 0
        if control:
            # Only the broker writes transaction markers (Kafka: INVALID_RECORD).
            return _partition_error(index, ErrorCode.invalid_record, "clients may not produce control batches")
        if empty:
            # Kafka refuses a batch of no records (INVALID_RECORD): it would take no offset.
            return _partition_error(index, ErrorCode.invalid_record, "a record batch must hold at least one record")
        if batches[0][1].attributes & TRANSACTIONAL_MASK:
            if transactional_id is None:
                # Kafka refuses transactional records from a request without a transactional id.
                return _partition_error(index, ErrorCode.transactional_id_authorization_failed,
                                        "transactional records need the request's transactional id")
            header = batches[0][1]
            # As Kafka: a partition where this producer's transaction is already open (an
            # earlier batch of it appended) was verified then; only its first batch asks
            if not partition_log.has_ongoing_transaction(header.producer_id, header.producer_epoch):
                refused = _unverified(broker, transactional_id, topic_name, index, header)
                if refused is not None:
                    return refused
        info = partition_log.append(records, validated=batches, defer_flush=True)
    except RecordErrors as exc:
        errors = [(rec, why) for _b, rec, why in exc.errors]
        return _partition_error(index, ErrorCode.invalid_record, str(exc), record_errors=errors)
    except InvalidRecordError as exc:
        log.info("produce to %s-%d rejected: %s", topic_name, index, exc)
        return _partition_error(index, error_code_for(exc), str(exc))
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic_name, index, exc)
        return _partition_error(index, ErrorCode.kafka_storage_error, f"storage error: {exc.strerror}")
    broker.on_append(topic_name, index)
    if acks_all is not None:
        acks_all.append((topic_name, index, info.last_offset + 1))
    if partition_log.flush_messages_due:
        flushes.append((topic_name, index, partition_log))
    return _new_tuple(PartitionProduceResponse,
                      (index, 0, info.first_offset, info.log_append_time, info.log_start_offset, (), None))
