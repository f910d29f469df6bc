"""TxnOffsetCommit (28, v0-4): offsets committed inside a producer's transaction (KIP-98).

The offsets go to ``__consumer_offsets`` as a transactional batch of the producer's id and
epoch and stay pending (invisible to OffsetFetch) until the transaction's marker is written
there (see :mod:`pulllog.group.coordinator`).

Versions: v0-v2 carry the transactional id, group, producer id and epoch; v3 (KIP-447) adds
the member id, generation and group instance id, which the coordinator then checks like an
OffsetCommit's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID); v3+ are flexible;
v4 changes nothing on the wire (it tells the client the broker answers
TRANSACTION_ABORTABLE). A partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and
not committed, as Kafka does. Kafka answers COORDINATOR_NOT_AVAILABLE instead of
COORDINATOR_LOAD_IN_PROGRESS to v0-v1 clients; pulllog never answers the latter (it loads
the groups before it listens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...group.coordinator import OffsetCommit, TxnOffsetCommitRequest
from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import PartitionError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    b = ctx.body
    results: dict[tuple[str, int], ErrorCode] = {}
    offsets = []
    for t in b.topics:
        for p in t.partitions:
            missing = broker.partition(t.name, p.partition_index)
            if isinstance(missing, PartitionError):
                results[(t.name, p.partition_index)] = missing.code
                continue
            offsets.append(OffsetCommit(t.name, p.partition_index, p.committed_offset,
                                        int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata))
    if offsets:
        committed = broker.groups.txn_offset_commit(TxnOffsetCommitRequest(
            b.transactional_id, b.group_id, b.producer_id, b.producer_epoch,
            int(getattr(b, "generation_id", -1)), getattr(b, "member_id", ""),
            getattr(b, "group_instance_id", None), tuple(offsets)))
        results.update({(r.topic, r.partition): r.error for r in committed.partitions})
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in b.topics:
        topics.setdefault(t.name, []).extend(
            {"partition_index": p.partition_index, "error_code": results[(t.name, p.partition_index)]}
            for p in t.partitions)
    return build(response_class(ApiKey.TXN_OFFSET_COMMIT, ctx.version), {
        "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
