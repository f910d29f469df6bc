"""CreatePartitions (37): grow a topic's partition count (never shrink)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import UnknownTopicError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    results = []
    for t in body.topics:
        try:
            if t.assignments:
                raise ValueError("manual replica assignments are not supported")
            broker.topics.add_partitions(t.name, t.count, validate_only=bool(body.validate_only))
            results.append({"name": t.name, "error_code": 0, "error_message": None})
        except UnknownTopicError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": str(exc)})
        except ValueError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.invalid_partitions, "error_message": str(exc)})
    return build(response_class(ApiKey.CREATE_PARTITIONS, ctx.version), {"throttle_time": 0, "results": results})
