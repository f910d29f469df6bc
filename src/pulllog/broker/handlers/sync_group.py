"""SyncGroup (14): the leader hands in the assignment; every member gets its part.

v5+ answers with the group's protocol type and name (KIP-559), so a client can check them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.SYNC_GROUP, 0, 5)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import SyncRequest  # on first use (see Broker.groups)
    b = ctx.body
    result = await broker.groups.sync(SyncRequest(
        group_id=b.group_id, generation=b.generation_id, member_id=b.member_id,
        group_instance_id=getattr(b, "group_instance_id", None),
        assignments={a.member_id: bytes(a.assignment) for a in b.assignments}))
    return build(response_class(ApiKey.SYNC_GROUP, ctx.version), {
        "throttle_time": 0, "error_code": result.error, "assignment": result.assignment,
        # As Kafka: an error answer names no protocol (null, v5+).
        "protocol_type": result.protocol_type if result.error == 0 else None,
        "protocol_name": result.protocol_name if result.error == 0 else None})
