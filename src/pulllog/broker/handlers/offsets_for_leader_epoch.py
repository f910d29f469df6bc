"""OffsetForLeaderEpoch (23) v2-v4: where a leader epoch ended in this leader's log.

A follower asks it before fetching (replica_fetcher.py: truncation to the leader's history);
clients ask it to validate a position after a leader change (KIP-320). For each partition:
the largest epoch <= the one asked for and the offset where it ended (the start of the next
epoch, or the log end offset for the latest); (-1, -1) when the epoch is unknown or newer
than every known one. The partition must be led here, in ``current_leader_epoch`` when one
is given (-1: no check): else NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or
UNKNOWN_LEADER_EPOCH. A single broker's partitions have one epoch, 0, since their start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


def _end_offset(broker: "BrokerApi", topic: str, index: int, current_epoch: int, epoch: int) -> tuple[ErrorCode, int, int]:
    replicas = broker.replicas
    if replicas is not None:
        return replicas.end_offset_for_epoch(topic, index, current_epoch, epoch)
    found = broker.partition(topic, index)
    if isinstance(found, PartitionError):
        return found.code, -1, -1
    if current_epoch > 0:
        return ErrorCode.unknown_leader_epoch, -1, -1
    return (ErrorCode.none, 0, found.log_end_offset) if epoch == 0 else (ErrorCode.none, -1, -1)


@handler(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    topics = []
    for t in ctx.body.topics:
        parts = []
        for p in t.partitions:
            code, epoch, end = _end_offset(broker, t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
            parts.append({"error_code": code, "partition": p.partition, "leader_epoch": epoch, "end_offset": end})
        topics.append({"topic": t.topic, "partitions": parts})
    return build(response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.version), {"throttle_time": 0, "topics": topics})
