"""OffsetDelete (47): remove committed offsets, refused for topics the group consumes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.OFFSET_DELETE, 0, 0)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    b = ctx.body
    wanted = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    top, results = broker.groups.delete_offsets(b.group_id, wanted)
    if top != ErrorCode.none:
        # Kafka answers a group-level error alone, without the topics.
        return build(response_class(ApiKey.OFFSET_DELETE, ctx.version), {"error_code": top, "throttle_time": 0, "topics": []})
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": results.get((t.name, p.partition_index), top)}
        for p in t.partitions]} for t in b.topics]
    return build(response_class(ApiKey.OFFSET_DELETE, ctx.version), {"error_code": top, "throttle_time": 0, "topics": topics})
