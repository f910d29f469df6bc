"""DescribeCluster (60): the live brokers and the controller, without any topic (KIP-700).

What Metadata says about brokers, as Kafka's admin clients ask for it (``describeCluster``).
A cluster member answers with every broker registered in ZooKeeper and the elected controller
(-1 between a controller's death and the next election), as Kafka's ZooKeeper-mode brokers
did; a single broker with itself. v1's ``endpoint_type`` 2 (the controllers' endpoints) is
for KRaft controllers, which a broker does not answer for: UNSUPPORTED_ENDPOINT_TYPE, as
Kafka's brokers answer it. v2's fenced brokers: pulllog fences none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler
from .metadata import CLUSTER_OPERATIONS, NOT_REQUESTED, broker_list

if TYPE_CHECKING:
    from ..api import BrokerApi

_BROKERS_ENDPOINT = 1


@handler(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def handle(broker: BrokerApi, ctx: RequestContext) -> Any:
    endpoint_type = getattr(ctx.body, "endpoint_type", _BROKERS_ENDPOINT)
    data: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None,
                            "endpoint_type": endpoint_type, "cluster_id": broker.topics.cluster_id,
                            "controller_id": -1, "brokers": [],
                            "cluster_authorized_operations": NOT_REQUESTED}
    if endpoint_type != _BROKERS_ENDPOINT:
        data["error_code"] = ErrorCode.unsupported_endpoint_type
        data["error_message"] = "a broker describes brokers only (endpoint_type 1)"
        return build(response_class(ApiKey.DESCRIBE_CLUSTER, ctx.version), data)
    brokers, controller_id = broker_list(broker)
    data["brokers"] = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"],
                        "is_fenced": False} for b in brokers]
    data["controller_id"] = controller_id
    if ctx.body.include_cluster_authorized_operations:
        data["cluster_authorized_operations"] = CLUSTER_OPERATIONS
    return build(response_class(ApiKey.DESCRIBE_CLUSTER, ctx.version), data)
