"""InitProducerId (22): producer ids for idempotent producers, and for transactional ones
(with a transactional.id) the transaction coordinator's id and epoch (txn/coordinator.py).

Without a transactional id: a single broker's ids are unique per broker run and across restarts
(seeded from the clock); a cluster member's come from blocks claimed in ZooKeeper, unique across
the cluster (broker/producer_ids.py), and COORDINATOR_LOAD_IN_PROGRESS (retriable) answers while
its next block is on its way. A producer that gives its id and epoch (KIP-360) gets the next epoch, or a new id
when the int16 epoch would overflow, as Kafka does.

With one: the coordinator bumps the epoch (fencing older instances of the id; an open
transaction of theirs is aborted first and this request answers CONCURRENT_TRANSACTIONS, which
clients retry), and answers INVALID_TRANSACTION_TIMEOUT for a transaction.timeout.ms over
transaction.max.timeout.ms. Versions before 4 hear INVALID_PRODUCER_EPOCH for PRODUCER_FENCED.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..producer_ids import ProducerIdsNotReady
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler
from .txn_errors import for_version

if TYPE_CHECKING:
    from ..api import BrokerApi

_MAX_EPOCH = 2**15 - 1


@handler(ApiKey.INIT_PRODUCER_ID, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    existing = int(getattr(body, "producer_id", -1))
    existing_epoch = int(getattr(body, "producer_epoch", -1))
    if body.transactional_id is not None:
        from ...txn.coordinator import InitProducerIdRequest

        timeout_ms = body.transaction_timeout // datetime.timedelta(milliseconds=1)
        try:
            with broker.collect_flushes() as flushes:
                result = broker.transactions.init_producer_id(
                    InitProducerIdRequest(body.transactional_id, timeout_ms, existing, existing_epoch))
        except ProducerIdsNotReady:
            return _answer(ctx, ErrorCode.coordinator_load_in_progress, -1, -1)
        error = result.error
        if (failed := await coordinator_flushes(flushes)) and error == ErrorCode.none:  # after the fsync / ISR
            error = ErrorCode(coordinator_append_error(failed, ErrorCode.not_coordinator))
        data = {"throttle_time": 0, "error_code": for_version(error, ctx.version, fenced_since=4),
                "producer_id": result.producer_id, "producer_epoch": result.producer_epoch}
        return build(response_class(ApiKey.INIT_PRODUCER_ID, ctx.version), data)
    if existing >= 0 and existing_epoch < _MAX_EPOCH - 1:
        producer_id, epoch = existing, max(existing_epoch, -1) + 1
    else:
        try:
            producer_id, epoch = broker.next_producer_id(), 0
        except ProducerIdsNotReady:
            return _answer(ctx, ErrorCode.coordinator_load_in_progress, -1, -1)
    return _answer(ctx, ErrorCode.none, producer_id, epoch)


def _answer(ctx: RequestContext, error: ErrorCode, producer_id: int, epoch: int) -> Any:
    data = {"throttle_time": 0, "error_code": error, "producer_id": producer_id, "producer_epoch": epoch}
    return build(response_class(ApiKey.INIT_PRODUCER_ID, ctx.version), data)
