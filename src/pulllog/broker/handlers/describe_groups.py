"""DescribeGroups (15): state, protocol, members with client ids, hosts and assignments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...group.state import GroupState
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


@handler(15, "DescribeGroups", 0, 5)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    out = []
    for group_id in ctx.body.groups:
        g = broker.groups.groups.get(group_id)
        if g is None:
            # Kafka answers an unknown group as Dead with no error (v0-v5).
            out.append({"error_code": 0, "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                        "protocol_data": "", "members": []})
            continue
        # As Kafka's GroupMetadata.summary: the protocol and each member's metadata and
        # assignment only for a Stable group; mid-rebalance they are not settled yet.
        stable = g.state is GroupState.STABLE
        out.append({
            "error_code": ErrorCode.none, "group_id": group_id, "group_state": g.state.value,
            "protocol_type": g.protocol_type or "", "protocol_data": (g.protocol_name or "") if stable else "",
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": "/" + m.client_host,
                "member_metadata": m.metadata_for(g.protocol_name or "") if stable else b"",
                "member_assignment": m.assignment if stable else b""} for m in g.members.values()],
        })
    return build(response_class("describe_groups", ctx.version), {"throttle_time": 0, "groups": out})
