"""OffsetDelete (47): remove committed offsets, refused for topics the group consumes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, coordinator_flushes, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.OFFSET_DELETE, 0, 0)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import OffsetDeleteRequest  # on first use (see Broker.groups)
    b = ctx.body
    wanted = tuple((t.name, p.partition_index) for t in b.topics for p in t.partitions)
    with broker.collect_flushes() as flushes:
        result = broker.groups.delete_offsets(OffsetDeleteRequest(b.group_id, wanted))
    if result.error != ErrorCode.none:
        # Kafka answers a group-level error alone, without the topics.
        return build(response_class(ApiKey.OFFSET_DELETE, ctx.version),
                     {"error_code": result.error, "throttle_time": 0, "topics": []})
    codes = {(r.topic, r.partition): r.error for r in result.partitions}
    if await coordinator_flushes(flushes):  # flush.messages: answered once the tombstones are on disk
        codes = {tp: ErrorCode.kafka_storage_error if code == ErrorCode.none else code for tp, code in codes.items()}
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": codes[(t.name, p.partition_index)]}
        for p in t.partitions]} for t in b.topics]
    return build(response_class(ApiKey.OFFSET_DELETE, ctx.version),
                 {"error_code": result.error, "throttle_time": 0, "topics": topics})
