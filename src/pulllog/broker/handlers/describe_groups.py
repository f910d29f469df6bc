"""DescribeGroups (15): state, protocol, members with client ids, hosts and assignments.

Kafka answers an unknown group as Dead with no error (v0-v5); the coordinator's
``describe`` does the same, and leaves protocol and member details empty unless Stable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ...group.coordinator import GroupDescription
    from ..api import BrokerApi


# Every operation a group supports, as Kafka allows them without an authorizer (KIP-430):
# READ(3), DELETE(6), DESCRIBE(8) and, since group configs (Kafka 4), DESCRIBE_CONFIGS(10) and
# ALTER_CONFIGS(11). INT32_MIN: the client did not ask.
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
NOT_REQUESTED = -(2**31)


def _described(d: GroupDescription, operations: int) -> dict[str, Any]:
    return {
        "authorized_operations": operations,
        "error_code": d.error, "group_id": d.group_id, "group_state": d.state,
        "protocol_type": d.protocol_type, "protocol_data": d.protocol,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": "/" + m.client_host, "member_metadata": m.metadata, "member_assignment": m.assignment}
            for m in d.members],
    }


@handler(ApiKey.DESCRIBE_GROUPS, 0, 5)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import DescribeGroupsRequest  # on first use (see Broker.groups)
    operations = GROUP_OPERATIONS if getattr(ctx.body, "include_authorized_operations", False) else NOT_REQUESTED
    result = broker.groups.describe(DescribeGroupsRequest(tuple(ctx.body.groups)))
    groups = [_described(d, operations) for d in result.groups]
    return build(response_class(ApiKey.DESCRIBE_GROUPS, ctx.version), {"throttle_time": 0, "groups": groups})
