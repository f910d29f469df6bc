"""FindCoordinator (10): on a single broker, this broker coordinates every group (key type 0)
and every transactional id (key type 1). A cluster member answers the leader of the key's
partition of ``__consumer_offsets`` / ``__transaction_state`` (creating the topic on first
use; COORDINATOR_NOT_AVAILABLE while it has no live leader; see cluster_admin). An empty key,
or another key type (2: share groups), answers INVALID_REQUEST, as Kafka. Clients also read
FindCoordinator's presence in ApiVersions as a feature flag (librdkafka only compresses with
lz4 when the broker serves it).
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


async def _answer(broker: "BrokerApi", key: str, key_type: int) -> dict[str, Any]:
    host, port = broker.advertised
    if key_type not in (GROUP, TRANSACTION) or (key_type == TRANSACTION and not key):
        why = "a transactional id must not be empty" if key_type == TRANSACTION else \
            f"coordinator key type {key_type} is not served (0: group, 1: transaction)"
        return {"key": key, "error_code": ErrorCode.invalid_request, "error_message": why,
                "node_id": -1, "host": "", "port": -1}
    if broker.membership is not None:  # a cluster member: the leader of the key's partition
        from ..topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
        from .cluster_admin import find_coordinator

        topic = OFFSETS_TOPIC if key_type == GROUP else TRANSACTION_STATE_TOPIC
        code, message, node_id, host, port = await find_coordinator(broker, topic, key)
        return {"key": key, "error_code": code, "error_message": message, "node_id": node_id,
                "host": host, "port": port}
    return {"key": key, "error_code": 0, "error_message": None, "node_id": broker.config.node_id,
            "host": host, "port": port}


@handler(ApiKey.FIND_COORDINATOR, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    key_type = int(getattr(body, "key_type", GROUP))
    if ctx.version >= 4:
        coordinators = [await _answer(broker, key, key_type) for key in body.coordinator_keys]
        return build(response_class(ApiKey.FIND_COORDINATOR, ctx.version), {"throttle_time": 0, "coordinators": coordinators})
    answer = await _answer(broker, body.key, key_type)
    answer.pop("key")
    return build(response_class(ApiKey.FIND_COORDINATOR, ctx.version), {"throttle_time": 0, **answer})
