"""DeleteGroups (42): NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND if unknown.

When the tombstones make ``flush.messages`` due, the answer waits for their fsync (off the
event loop); a group whose fsync failed answers KAFKA_STORAGE_ERROR."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...group.coordinator import OFFSETS_TOPIC
from ...net.coordinator_keys import partition_for
from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, coordinator_flushes, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DELETE_GROUPS, 0, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import DeleteGroupsRequest  # on first use (see Broker.groups)
    with broker.collect_flushes() as flushes:
        result = broker.groups.delete_groups(DeleteGroupsRequest(tuple(ctx.body.groups_names)))
    failed = await coordinator_flushes(flushes)  # flush.messages: answered once the tombstones are on disk
    results = [{"group_id": g.group_id,
                "error_code": ErrorCode.kafka_storage_error if failed and g.error == ErrorCode.none
                and any(_offsets_log(broker, g.group_id) is lg for lg in failed) else g.error}
               for g in result.groups]
    return build(response_class(ApiKey.DELETE_GROUPS, ctx.version), {"throttle_time": 0, "results": results})


def _offsets_log(broker: "BrokerApi", group_id: str) -> object:
    """The ``__consumer_offsets`` partition log holding the group (as the coordinator hashes it)."""
    if broker.topics.find(OFFSETS_TOPIC) is None:
        return None
    return broker.partition(OFFSETS_TOPIC, partition_for(group_id, broker.offsets_partition_count()))
