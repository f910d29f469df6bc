"""SyncGroup (14): the leader hands in the assignment; every member gets its part."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


@handler(14, "SyncGroup", 0, 5)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    b = ctx.body
    assignments = {a.member_id: bytes(a.assignment) for a in b.assignments}
    error, assignment = await broker.groups.sync(b.group_id, b.generation_id, b.member_id,
                                                 getattr(b, "group_instance_id", None), assignments)
    group = broker.groups.groups.get(b.group_id)
    data = {"throttle_time": 0, "error_code": error, "assignment": assignment,
            "protocol_type": group.protocol_type if group else None,
            "protocol_name": group.protocol_name if group else None}
    return build(response_class("sync_group", ctx.version), data)
