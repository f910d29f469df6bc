"""ListGroups (16): every group this coordinator knows, with its state (v4+ filters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.LIST_GROUPS, 0, 5)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import ListGroupsRequest  # on first use (see Broker.groups)
    result = broker.groups.list_groups(ListGroupsRequest(
        frozenset(getattr(ctx.body, "states_filter", ()) or ()), frozenset(getattr(ctx.body, "types_filter", ()) or ())))
    groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
               "group_type": "classic"} for g in result.groups]
    return build(response_class(ApiKey.LIST_GROUPS, ctx.version), {"throttle_time": 0, "error_code": 0, "groups": groups})
