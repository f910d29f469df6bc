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
    results = [{"group_id": g, "error_code": broker.groups.delete_group(g)} for g in ctx.body.groups_names]
    return build(response_class(ApiKey.DELETE_GROUPS, ctx.version), {"throttle_time": 0, "results": results})
