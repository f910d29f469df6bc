"""DescribeTransactions (65, KIP-664): each transactional id's state, producer id and epoch,
timeout, start time and partitions (while preparing: those still without their marker).
An unknown id answers TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    states = []
    for transactional_id in ctx.body.transactional_ids:
        d = broker.transactions.describe(transactional_id)
        topics: dict[str, list[int]] = {}
        for topic, partition in d.partitions:
            topics.setdefault(topic, []).append(partition)
        states.append({"error_code": d.error, "transactional_id": transactional_id, "transaction_state": d.state,
                       "transaction_timeout": d.timeout_ms, "transaction_start_time": d.start_timestamp,
                       "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                       "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return build(response_class(ApiKey.DESCRIBE_TRANSACTIONS, ctx.version),
                 {"throttle_time": 0, "transaction_states": states})
