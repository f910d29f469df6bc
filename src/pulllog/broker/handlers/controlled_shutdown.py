"""ControlledShutdown (7) v1-v3: a cluster member stopping cleanly asks the controller first.

Served by the controller only (elsewhere NOT_CONTROLLER, as Kafka's ZooKeeper-mode brokers
answer it): the controller moves the leadership of the asking broker's partitions to other
in-sync replicas and takes it out of the ISRs of the partitions it follows (see
:meth:`pulllog.cluster.active_controller.ActiveController.controlled_shutdown`), then answers
with the partitions the broker still leads. A broker that is not registered: BROKER_NOT_AVAILABLE;
a broker epoch older than its registration (v2+): STALE_BROKER_EPOCH. A single broker does not
serve it (it has no controller; its ApiVersions leaves it out). Schemas: :mod:`pulllog.net.controlled_shutdown` (kio has none).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.CONTROLLED_SHUTDOWN, 1, 3)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    code, remaining = ErrorCode.not_controller, []
    membership = broker.membership
    if membership is not None:
        from kazoo.exceptions import KazooException

        from ...cluster.errors import BrokerNotAvailableError, NotControllerError, StaleBrokerEpochError

        try:
            remaining = await asyncio.to_thread(membership.controlled_shutdown, int(body.broker_id),
                                                int(getattr(body, "broker_epoch", -1)))
            code = ErrorCode.none
        except NotControllerError:
            code = ErrorCode.not_controller
        except BrokerNotAvailableError:
            code = ErrorCode.broker_not_available
        except StaleBrokerEpochError:
            code = ErrorCode.stale_broker_epoch
        except KazooException:  # ZooKeeper away for a moment: the broker asks again
            code = ErrorCode.request_timed_out
    return build(response_class(ApiKey.CONTROLLED_SHUTDOWN, ctx.version), {
        "error_code": code,
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]})
