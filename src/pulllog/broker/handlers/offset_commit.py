"""OffsetCommit (8): appended to __consumer_offsets before the answer (durable when acked).

When the append makes ``flush.messages`` due, the answer waits for its fsync, done off the
event loop; a failed fsync answers KAFKA_STORAGE_ERROR, as a failed append does.

A partition that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION and not committed,
as Kafka does, whatever the group's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler

if TYPE_CHECKING:
    from ...group.coordinator import OffsetCommit
    from ..api import BrokerApi


@handler(ApiKey.OFFSET_COMMIT, 2, 9)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...group.coordinator import OffsetCommitRequest  # on first use (see Broker.groups)
    b = ctx.body
    generation = int(getattr(b, "generation_id_or_member_epoch", getattr(b, "generation_id", -1)))
    results, offsets = requested_offsets(broker, b.topics)
    if offsets:
        with broker.collect_flushes() as flushes:
            committed = broker.groups.commit_offsets(OffsetCommitRequest(
                b.group_id, generation, b.member_id, getattr(b, "group_instance_id", None), tuple(offsets)))
        results.update({(r.topic, r.partition): r.error for r in committed.partitions})
        if failed := await coordinator_flushes(flushes):  # answered once on disk (and the ISR's), as Kafka
            error = ErrorCode(coordinator_append_error(failed, ErrorCode.kafka_storage_error))
            results.update({(r.topic, r.partition): error for r in committed.partitions if r.error == ErrorCode.none})
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in b.topics:
        topics[t.name] = [{"partition_index": p.partition_index, "error_code": results[(t.name, p.partition_index)]}
                          for p in t.partitions]
    return build(response_class(ApiKey.OFFSET_COMMIT, ctx.version), {
        "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})


def requested_offsets(broker: "BrokerApi", topics: Any) -> tuple[dict[tuple[str, int], ErrorCode], list["OffsetCommit"]]:
    """A commit request's partitions (OffsetCommit's or TxnOffsetCommit's) split into the
    offsets to commit and the error of each partition that does not exist: as Kafka, that is
    checked before the group is, and such a partition is never committed."""
    from ...group.coordinator import OffsetCommit  # on first use (see Broker.groups)
    results: dict[tuple[str, int], ErrorCode] = {}
    offsets: list[OffsetCommit] = []
    for t in topics:
        for p in t.partitions:
            missing = broker.partition(t.name, p.partition_index)
            if isinstance(missing, PartitionError):
                results[(t.name, p.partition_index)] = missing.code
                continue
            offsets.append(OffsetCommit(t.name, p.partition_index, p.committed_offset,
                                        int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata))
    return results, offsets
