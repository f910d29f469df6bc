"""DeleteGroups (42): NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND if unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DELETE_GROUPS, 0, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import DeleteGroupsRequest  # on first use (see Broker.groups)
    result = broker.groups.delete_groups(DeleteGroupsRequest(tuple(ctx.body.groups_names)))
    results = [{"group_id": g.group_id, "error_code": g.error} for g in result.groups]
    return build(response_class(ApiKey.DELETE_GROUPS, ctx.version), {"throttle_time": 0, "results": results})
