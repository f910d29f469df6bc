"""JoinGroup (11): see pulllog.group.coordinator for the protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


@handler(11, "JoinGroup", 0, 9)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    b = ctx.body
    session_ms = int(b.session_timeout.total_seconds() * 1000)
    rebalance = getattr(b, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
    if rebalance_ms < 0:
        rebalance_ms = session_ms
    result = await broker.groups.join(
        b.group_id, b.member_id, getattr(b, "group_instance_id", None), ctx.request.client_id or "",
        ctx.client_host, session_ms, rebalance_ms, b.protocol_type,
        [(p.name, bytes(p.metadata)) for p in b.protocols],
        require_known_member_id=ctx.version >= 4, supports_skip_assignment=ctx.version >= 9,
    )
    data = {
        "throttle_time": 0, "error_code": result.error, "generation_id": result.generation,
        "protocol_type": result.protocol_type, "protocol_name": result.protocol_name or "",
        "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in result.members],
    }
    if ctx.version < 7 and data["protocol_name"] == "":
        data["protocol_name"] = ""
    return build(response_class("join_group", ctx.version), data)
