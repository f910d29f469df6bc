"""OffsetFetch (9): committed offsets (-1 when none) with their metadata; one group (v1-v7)
or several (v8+). Null topics means every partition the group has committed.

Offsets pending in a transaction (TxnOffsetCommit) are never answered. v7+ carry
``require_stable`` (KIP-447: a read_committed consumer sets it): a partition with pending
transactional offsets is then answered UNSTABLE_OFFSET_COMMIT with offset -1, and the
consumer retries until the transaction ends. Older versions get the last committed offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


def _group_answer(broker: "BrokerApi", group_id: str, topics: Any,
                  require_stable: bool) -> tuple[int, list[dict[str, Any]]]:
    """(the group's error, its topics): a cluster member that does not coordinate the group
    answers NOT_COORDINATOR with no partitions."""
    from ...group.coordinator import OffsetFetchRequest  # on first use (see Broker.groups)
    wanted = None if topics is None else tuple((t.name, p) for t in topics for p in t.partition_indexes)
    result = broker.groups.fetch_offsets(OffsetFetchRequest(group_id, wanted, require_stable))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for found in result.partitions:
        committed = found.committed
        by_topic.setdefault(found.topic, []).append({
            "partition_index": found.partition,
            "committed_offset": committed.offset if committed else -1,
            "committed_leader_epoch": committed.leader_epoch if committed else -1,
            "metadata": committed.metadata if committed else "",
            "error_code": found.error,
        })
    if result.error and topics is not None:  # v1 has no group error: each partition carries it
        for t in topics:
            by_topic[t.name] = [{"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                 "metadata": "", "error_code": result.error} for p in t.partition_indexes]
    return result.error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


@handler(ApiKey.OFFSET_FETCH, 1, 9)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    b = ctx.body
    require_stable = bool(getattr(b, "require_stable", False))  # v7+
    if ctx.version >= 8:
        groups = []
        for g in b.groups:
            error, topics = _group_answer(broker, g.group_id, g.topics, require_stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return build(response_class(ApiKey.OFFSET_FETCH, ctx.version), {"throttle_time": 0, "groups": groups})
    error, topics = _group_answer(broker, b.group_id, b.topics, require_stable)
    return build(response_class(ApiKey.OFFSET_FETCH, ctx.version), {
        "throttle_time": 0, "topics": topics, "error_code": error})
