"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.HEARTBEAT, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import HeartbeatRequest  # on first use (see Broker.groups)
    b = ctx.body
    result = broker.groups.heartbeat(HeartbeatRequest(b.group_id, b.generation_id, b.member_id,
                                                      getattr(b, "group_instance_id", None)))
    return build(response_class(ApiKey.HEARTBEAT, ctx.version), {"throttle_time": 0, "error_code": result.error})
