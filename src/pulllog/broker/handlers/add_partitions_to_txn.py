"""AddPartitionsToTxn (24), v0-5: a producer adds partitions to its transaction before writing.

v0-3 (clients): one transaction; every partition gets the coordinator's one answer. A partition
that does not exist answers UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED,
and nothing is added (Kafka's rule). v4+ (KIP-890, between brokers; kafka-transactions.sh and
tests use it too): a batch of transactions with a top-level error code; ``verify_only`` only
checks that the partitions are in the transaction (NONE, or TRANSACTION_ABORTABLE; v4 hears
INVALID_TXN_STATE for that). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler
from .txn_errors import for_version

if TYPE_CHECKING:
    from ..api import BrokerApi

TopicPartition = tuple[str, int]


def _partitions(topics: Iterable[Any]) -> tuple[TopicPartition, ...]:
    return tuple((t.name, int(p)) for t in topics for p in t.partitions)


def _topic_results(codes: Mapping[TopicPartition, ErrorCode], version: int) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": partition,
                                             "partition_error_code": for_version(code, version, abortable_since=5)})
    return [{"name": name, "results_by_partition": results} for name, results in topics.items()]


def _exists(broker: "BrokerApi", tp: TopicPartition) -> bool:
    """Is ``tp`` a partition of the cluster? Kafka's coordinator asks its metadata cache: a
    cluster member's is its partition views (it holds logs only for the partitions it is a
    replica of, and a transaction spans partitions led anywhere); a single broker's, its topics."""
    if broker.replicas is not None:
        return tp in broker.partition_views
    return not isinstance(broker.partition(*tp), PartitionError)


def _add(broker: "BrokerApi", transactional_id: str, producer_id: int, producer_epoch: int,
         partitions: tuple[TopicPartition, ...], verify_only: bool) -> dict[TopicPartition, ErrorCode]:
    from ...txn.coordinator import AddPartitionsRequest

    if not verify_only:
        missing = {tp for tp in partitions if not _exists(broker, tp)}
        if missing:
            return {tp: ErrorCode.unknown_topic_or_partition if tp in missing else ErrorCode.operation_not_attempted
                    for tp in partitions}
    return broker.transactions.add_partitions(
        AddPartitionsRequest(transactional_id, producer_id, producer_epoch, partitions, verify_only))


async def _add_flushed(broker: "BrokerApi", transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: tuple[TopicPartition, ...], verify_only: bool) -> dict[TopicPartition, ErrorCode]:
    """``_add``'s codes once the state append's fsync is done (flush.messages); NOT_COORDINATOR
    for the added partitions if it failed, as for a failed append."""
    with broker.collect_flushes() as flushes:
        codes = _add(broker, transactional_id, producer_id, producer_epoch, partitions, verify_only)
    if failed := await coordinator_flushes(flushes):
        error = ErrorCode(coordinator_append_error(failed, ErrorCode.not_coordinator))
        return {tp: error if code == ErrorCode.none else code for tp, code in codes.items()}
    return codes


@handler(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.version)
    if ctx.version <= 3:
        codes = await _add_flushed(broker, body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
                                   int(body.v3_and_below_producer_epoch), _partitions(body.v3_and_below_topics), False)
        return build(cls, {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(codes, ctx.version)})
    results = []
    for txn in body.transactions:
        codes = await _add_flushed(broker, txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch),
                                   _partitions(txn.topics), bool(txn.verify_only))
        results.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(codes, ctx.version)})
    return build(cls, {"throttle_time": 0, "error_code": 0, "results_by_transaction": results})
