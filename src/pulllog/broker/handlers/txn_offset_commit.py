"""TxnOffsetCommit (28, v0-4): offsets committed inside a producer's transaction (KIP-98).

The offsets go to ``__consumer_offsets`` as a transactional batch of the producer's id and
epoch and stay pending (invisible to OffsetFetch) until the transaction's marker is written
there (see :mod:`pulllog.group.coordinator`).

Versions: v0-v2 carry the transactional id, group, producer id and epoch; v3 (KIP-447) adds
the member id, generation and group instance id, which the coordinator then checks like an
OffsetCommit's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID); v3+ are flexible;
v4 changes nothing on the wire (it tells the client the broker answers
TRANSACTION_ABORTABLE). A partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and
not committed, as Kafka does.

As Kafka 4 (KIP-890 part 1), the transaction coordinator is asked first whether the group's
``__consumer_offsets`` partition is in the producer's ongoing transaction (AddOffsetsToTxn
put it there): if not, every partition is answered TRANSACTION_ABORTABLE (v4+) or
INVALID_TXN_STATE (v0-v3), and a fenced producer INVALID_PRODUCER_EPOCH, before the
group is looked at. Kafka answers COORDINATOR_NOT_AVAILABLE instead of
COORDINATOR_LOAD_IN_PROGRESS to v0-v1 clients; pulllog never answers the latter (it loads
the groups before it listens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...group.coordinator import OFFSETS_TOPIC, TxnOffsetCommitRequest
from ...net.coordinator_keys import partition_for
from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler
from .offset_commit import requested_offsets
from .txn_errors import for_version

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    b = ctx.body
    results, offsets = requested_offsets(broker, b.topics)
    if offsets and (refused := _unverified(broker, b, ctx.version)) is not ErrorCode.none:
        results.update({(o.topic, o.partition): refused for o in offsets})
    elif offsets:
        with broker.collect_flushes() as flushes:
            committed = broker.groups.txn_offset_commit(TxnOffsetCommitRequest(
                b.transactional_id, b.group_id, b.producer_id, b.producer_epoch,
                int(getattr(b, "generation_id", -1)), getattr(b, "member_id", ""),
                getattr(b, "group_instance_id", None), tuple(offsets)))
        results.update({(r.topic, r.partition): r.error for r in committed.partitions})
        if failed := await coordinator_flushes(flushes):
            # flush.messages: answered once on disk; a failed fsync as a failed append
            # (Kafka's coordinator answers NOT_COORDINATOR for a storage error: look it up again)
            error = ErrorCode(coordinator_append_error(failed, ErrorCode.not_coordinator))
            results.update({(r.topic, r.partition): error for r in committed.partitions if r.error == ErrorCode.none})
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in b.topics:
        topics.setdefault(t.name, []).extend(
            {"partition_index": p.partition_index, "error_code": results[(t.name, p.partition_index)]}
            for p in t.partitions)
    return build(response_class(ApiKey.TXN_OFFSET_COMMIT, ctx.version), {
        "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})


def _unverified(broker: "BrokerApi", body: Any, version: int) -> ErrorCode:
    """Why the group's offsets partition is not in the producer's transaction (NONE if it is)."""
    if broker.transactions.ownership_error(body.transactional_id) != ErrorCode.none:
        return ErrorCode.none  # another broker coordinates the id: not verified (see produce.py)
    partitions = broker.offsets_partition_count()
    tp = (OFFSETS_TOPIC, partition_for(body.group_id, partitions))
    code = broker.transactions.verify(body.transactional_id, int(body.producer_id), int(body.producer_epoch), [tp])[tp]
    # Kafka's verification answers a fenced producer INVALID_PRODUCER_EPOCH, whatever the version.
    return for_version(code, version, fenced_since=1 << 15, abortable_since=4)
