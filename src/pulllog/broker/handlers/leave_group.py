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
    b = ctx.body
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in b.members]
    else:
        members = [(b.member_id, None)]
    top, results = broker.groups.leave(b.group_id, members)
    if ctx.version < 3:
        return build(response_class(ApiKey.LEAVE_GROUP, ctx.version), {"throttle_time": 0, "error_code": results[0]})
    return build(response_class(ApiKey.LEAVE_GROUP, ctx.version), {
        "throttle_time": 0, "error_code": top,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": e}
                    for (m, i), e in zip(members, results)]})
