"""DeleteRecords (21): move a partition's log start offset forward (-1 = the high watermark)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import OffsetOutOfRangeError
from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DELETE_RECORDS, 0, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    topics = []
    for t in ctx.body.topics:
        parts = []
        for p in t.partitions:
            index = p.partition_index
            # A cluster member: only the leader moves the log start offset; followers take it
            # from their fetches (replica_fetcher.py).
            log = broker.partition(t.name, index) if broker.replicas is None else \
                broker.replicas.leader_log(t.name, index)
            if isinstance(log, PartitionError):
                parts.append({"partition_index": index, "low_watermark": -1, "error_code": log.code})
                continue
            target = log.high_watermark if p.offset == -1 else p.offset
            try:
                low = log.delete_records_before(target)
                parts.append({"partition_index": index, "low_watermark": low, "error_code": 0})
            except OffsetOutOfRangeError:
                parts.append({"partition_index": index, "low_watermark": -1, "error_code": ErrorCode.offset_out_of_range})
            except OSError:
                parts.append({"partition_index": index, "low_watermark": -1, "error_code": ErrorCode.kafka_storage_error})
        topics.append({"name": t.name, "partitions": parts})
    return build(response_class(ApiKey.DELETE_RECORDS, ctx.version), {"throttle_time": 0, "topics": topics})
