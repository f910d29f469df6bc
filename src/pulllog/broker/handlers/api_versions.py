"""ApiVersions (18): derived from the handler registry, so it advertises what is implemented."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.api_versions import api_versions_response
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


@handler(18, "ApiVersions", 0, 4)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    return api_versions_response(ctx.version, broker.supported_apis)
