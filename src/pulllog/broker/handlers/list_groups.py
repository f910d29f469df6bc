"""ListGroups (16): every group this coordinator knows, with its state (v4+ filters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


@handler(16, "ListGroups", 0, 5)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    states = {s.lower() for s in getattr(ctx.body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(ctx.body, "types_filter", ()) or ()}
    groups = []
    for g in broker.groups.list_groups():
        if states and g.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                       "group_state": g.state.value, "group_type": "classic"})
    return build(response_class("list_groups", ctx.version), {"throttle_time": 0, "error_code": 0, "groups": groups})
