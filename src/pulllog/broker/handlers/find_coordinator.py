"""FindCoordinator (10): on a single broker, this broker coordinates every group.

Transaction coordinators (key type 1) do not exist yet: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
which librdkafka and the Java client treat as fatal, so a transactional producer fails at
once with the message instead of retrying COORDINATOR_NOT_AVAILABLE until its own timeout. Clients also read FindCoordinator's presence in ApiVersions as
a feature flag (librdkafka only compresses with lz4 when the broker serves it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

GROUP, TRANSACTION = 0, 1
NO_TRANSACTIONS = ("pulllog does not support transactions yet: produce without transactional.id "
                   "(idempotence works without it)")


def _answer(broker: "BrokerApi", key: str, key_type: int) -> dict[str, Any]:
    host, port = broker.advertised
    if key_type != GROUP:
        return {"key": key, "error_code": ErrorCode.transactional_id_authorization_failed,
                "error_message": NO_TRANSACTIONS, "node_id": -1, "host": "", "port": -1}
    return {"key": key, "error_code": 0, "error_message": None, "node_id": broker.config.node_id,
            "host": host, "port": port}


@handler(ApiKey.FIND_COORDINATOR, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    key_type = int(getattr(body, "key_type", GROUP))
    if ctx.version >= 4:
        coordinators = [_answer(broker, key, key_type) for key in body.coordinator_keys]
        return build(response_class(ApiKey.FIND_COORDINATOR, ctx.version), {"throttle_time": 0, "coordinators": coordinators})
    answer = _answer(broker, body.key, key_type)
    answer.pop("key")
    return build(response_class(ApiKey.FIND_COORDINATOR, ctx.version), {"throttle_time": 0, **answer})
