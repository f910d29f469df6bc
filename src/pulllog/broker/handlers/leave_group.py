"""LeaveGroup (13): one member (v0-v2) or a batch of members (v3+, KIP-345)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.LEAVE_GROUP, 0, 5)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import LeaveGroupRequest, MemberIdentity  # on first use (see Broker.groups)
    b = ctx.body
    if ctx.version >= 3:
        members = tuple(MemberIdentity(m.member_id, m.group_instance_id) for m in b.members)
    else:
        members = (MemberIdentity(b.member_id),)
    result = broker.groups.leave(LeaveGroupRequest(b.group_id, members))
    if ctx.version < 3:
        return build(response_class(ApiKey.LEAVE_GROUP, ctx.version),
                     {"throttle_time": 0, "error_code": result.members[0].error})
    return build(response_class(ApiKey.LEAVE_GROUP, ctx.version), {
        "throttle_time": 0, "error_code": result.error,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": m.error}
                    for m in result.members]})
