"""JoinGroup (11): see pulllog.group.coordinator for the protocol.

Versions: v4+ makes a new dynamic member rejoin with the member id it is given
(MEMBER_ID_REQUIRED, KIP-394); v5+ carries group.instance.id (static membership, KIP-345);
v9+ may tell a returning static leader to skip the assignment (KIP-814). A v0 request has
no rebalance timeout: the session timeout stands in for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ...group.coordinator import JoinRequest
    from ..api import BrokerApi


def join_request(ctx: RequestContext) -> JoinRequest:
    from ...group.coordinator import JoinRequest  # on first use (see Broker.groups)
    b = ctx.body
    session_ms = int(b.session_timeout.total_seconds() * 1000)
    rebalance = getattr(b, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
    if rebalance_ms < 0:
        rebalance_ms = session_ms
    return JoinRequest(
        group_id=b.group_id, member_id=b.member_id, group_instance_id=getattr(b, "group_instance_id", None),
        client_id=ctx.request.client_id or "", client_host=ctx.client_host,
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, protocol_type=b.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in b.protocols),
        require_known_member_id=ctx.version >= 4, supports_skip_assignment=ctx.version >= 9,
    )


def _protocol_name(name: str | None, version: int) -> str | None:
    """Null (v7+, as Kafka) when no protocol is chosen yet, e.g. with MEMBER_ID_REQUIRED."""
    return name if version >= 7 else (name or "")


@handler(ApiKey.JOIN_GROUP, 0, 9)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    result = await broker.groups.join(join_request(ctx))
    return build(response_class(ApiKey.JOIN_GROUP, ctx.version), {
        "throttle_time": 0, "error_code": result.error, "generation_id": result.generation,
        "protocol_type": result.protocol_type, "protocol_name": _protocol_name(result.protocol_name, ctx.version),
        "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in result.members],
    })
