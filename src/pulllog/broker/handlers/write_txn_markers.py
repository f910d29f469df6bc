"""WriteTxnMarkers (27), v1-2: write commit or abort markers, as a transaction coordinator
asks a partition leader to. Inside one broker the coordinator calls the same function
(broker/txn_markers.py) directly; this API is what kafka-transactions.sh ``abort`` sends to
end a hanging transaction, and what the cluster issue's coordinators will send each other.
Kafka 4 removed v0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..txn_markers import write_txn_markers
from . import NotReplicatedError, RequestContext, coordinator_flushes, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


def _failure(failed: "dict[Any, OSError]", partition_log: object) -> ErrorCode:
    """A written marker's answer once its flush (or, in a cluster, its replication) is done:
    KAFKA_STORAGE_ERROR for a failed fsync, the replication's own answer (NOT_ENOUGH_REPLICAS_
    AFTER_APPEND, ...) as Kafka's acks=all append gives it, else NONE."""
    error = failed.get(partition_log)
    if error is None:
        return ErrorCode.none
    return ErrorCode(error.code) if isinstance(error, NotReplicatedError) else ErrorCode.kafka_storage_error


@handler(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    markers = []
    for marker in ctx.body.markers:
        partitions = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        with broker.collect_flushes() as flushes:
            codes = write_txn_markers(broker, int(marker.producer_id), int(marker.producer_epoch),
                                      bool(marker.transaction_result), int(marker.coordinator_epoch), partitions)
        failed = await coordinator_flushes(flushes)  # flush.messages: answered once the markers are on disk
        if failed:
            codes = {tp: _failure(failed, broker.partition(*tp)) if code == ErrorCode.none else code
                     for tp, code in codes.items()}
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), code in codes.items():
            topics.setdefault(topic, []).append({"partition_index": index, "error_code": code})
        markers.append({"producer_id": marker.producer_id,
                        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return build(response_class(ApiKey.WRITE_TXN_MARKERS, ctx.version), {"markers": markers})
