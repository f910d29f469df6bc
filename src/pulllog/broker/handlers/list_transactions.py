"""ListTransactions (66, KIP-664), v0-2: the transactional ids this coordinator knows, filtered
by state names (unknown names come back in ``unknown_state_filters``), producer ids, v1's
duration (running longer than, KIP-994) and v2's transactional id pattern (a regular
expression the whole id matches, KIP-1152; INVALID_REGULAR_EXPRESSION when it does not compile)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...txn.coordinator import ListTransactionsRequest

    body = ctx.body
    result = broker.transactions.list_transactions(ListTransactionsRequest(
        frozenset(body.state_filters), frozenset(int(p) for p in body.producer_id_filters),
        int(getattr(body, "duration_filter", -1)), getattr(body, "transactional_id_pattern", None)))
    states = [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
               "transaction_state": t.state} for t in result.transactions]
    return build(response_class(ApiKey.LIST_TRANSACTIONS, ctx.version),
                 {"throttle_time": 0, "error_code": result.error,
                  "unknown_state_filters": list(result.unknown_states), "transaction_states": states})
