"""InitProducerId (22): hand out producer ids so idempotent producers (the default in
librdkafka and the Java client) start. The logs check their sequences (log/producer_state.py);
transactions come later. Ids are unique per broker run and across restarts (seeded from the
clock). A producer that gives its id and epoch (KIP-360) gets the next epoch, or a new id
when the int16 epoch would overflow, as Kafka does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

_MAX_EPOCH = 2**15 - 1


@handler(ApiKey.INIT_PRODUCER_ID, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    if body.transactional_id is not None:
        # No transaction coordinator yet: an error clients treat as fatal, not a retriable one
        # (see find_coordinator.py).
        data = {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
        return build(response_class(ApiKey.INIT_PRODUCER_ID, ctx.version), data)
    existing = int(getattr(body, "producer_id", -1))
    existing_epoch = int(getattr(body, "producer_epoch", -1))
    if existing >= 0 and existing_epoch < _MAX_EPOCH - 1:
        producer_id, epoch = existing, max(existing_epoch, -1) + 1
    else:
        producer_id, epoch = broker.next_producer_id(), 0
    data = {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}
    return build(response_class(ApiKey.INIT_PRODUCER_ID, ctx.version), data)
