"""DescribeProducers (61, v0; KIP-664): the producers a partition's log knows, as
``kafka-transactions.sh describe-producers`` shows them.

Per producer: id, epoch, last sequence (-1 when its batches are gone), the timestamp of its
last batch or marker, the coordinator epoch of its last marker (-1 before any) and the
first offset of its open transaction (-1 when none is open: a hanging transaction shows up
here with an old start offset). A partition that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION; pulllog has one replica, so never NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    topics = []
    for t in ctx.body.topics:
        parts = []
        for index in t.partition_indexes:
            log = broker.partition(t.name, index)
            if isinstance(log, PartitionError):
                parts.append({"partition_index": index, "error_code": log.code, "error_message": log.message,
                              "active_producers": []})
                continue
            producers = [
                {"producer_id": v.producer_id, "producer_epoch": v.producer_epoch, "last_sequence": v.last_sequence,
                 "last_timestamp": v.last_timestamp, "coordinator_epoch": v.coordinator_epoch,
                 "current_txn_start_offset": v.current_txn_start_offset}
                for v in log.producer_states()
            ]
            parts.append({"partition_index": index, "error_code": 0, "active_producers": producers})
        topics.append({"name": t.name, "partitions": parts})
    return build(response_class(ApiKey.DESCRIBE_PRODUCERS, ctx.version), {"throttle_time": 0, "topics": topics})
