"""ListOffsets (2): earliest (-2) = log start offset, latest (-1) = high watermark (with
isolation level read_committed, v2+: the last stable offset, as Kafka), max timestamp (-3),
or the earliest offset whose timestamp is >= the target (through the time index), else -1.
A record found by timestamp at or past the last fetchable offset (the LSO for
read_committed) is answered as not found (-1), as Kafka does: the consumer could not read
it yet. On a cluster member only the partition's leader answers (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for another current_leader_epoch), and latest is
the high watermark, which the followers have too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
READ_COMMITTED = 1


@handler(ApiKey.LIST_OFFSETS, 1, 7)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    topics = []
    isolation = int(getattr(ctx.body, "isolation_level", 0))
    replicas = broker.replicas
    for t in ctx.body.topics:
        parts = []
        for p in t.partitions:
            index = p.partition_index
            log = broker.partition(t.name, index) if replicas is None else \
                replicas.leader_log(t.name, index, int(getattr(p, "current_leader_epoch", -1)))
            if isinstance(log, PartitionError):
                parts.append({"partition_index": index, "error_code": log.code, "timestamp": -1, "offset": -1})
                continue
            ts, offset = -1, -1
            if p.timestamp == LATEST:
                offset = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
            elif p.timestamp == EARLIEST:
                offset = log.log_start_offset
            elif p.timestamp == MAX_TIMESTAMP or p.timestamp >= 0:
                found = log.max_timestamp_offset() if p.timestamp == MAX_TIMESTAMP else log.offset_for_timestamp(p.timestamp)
                fetchable = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
                if found is not None and found[0] < fetchable:
                    offset, ts = found
            else:
                # -4 (earliest local, v8+) and -5 (latest tiered, v9+) are tiered-storage specs;
                # Kafka answers any spec a version does not define with UNSUPPORTED_VERSION.
                parts.append({"partition_index": index, "error_code": ErrorCode.unsupported_version,
                              "timestamp": -1, "offset": -1})
                continue
            parts.append({"partition_index": index, "error_code": 0, "timestamp": ts, "offset": offset,
                          "leader_epoch": 0 if replicas is None else replicas.leader_epoch_of(t.name, index)})
        topics.append({"name": t.name, "partitions": parts})
    return build(response_class(ApiKey.LIST_OFFSETS, ctx.version), {"throttle_time": 0, "topics": topics})
