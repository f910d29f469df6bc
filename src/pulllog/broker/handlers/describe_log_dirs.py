"""DescribeLogDirs (35): each partition's size on disk, in the one log directory we have.

The answer is one result for the data directory, listing each requested partition (all
of them when ``topics`` is null) with ``partition_size`` = the bytes of its segment files
(``Log.size_bytes``), ``offset_lag`` 0 (a single replica is never behind its high
watermark) and ``is_future_key`` false. Requested topics or partitions that do not exist
are left out, as Kafka does. v4+ also reports the volume's total and usable bytes.

Served up to v4 although kio has v5: v5 (cordoned log dirs) is what kafka-python 3 takes as
the sign of a Kafka 4.3 broker (``infer_broker_version_from_api_versions``), and we are not one.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    requested = ctx.body.topics
    wanted: dict[str, set[int] | None]
    if requested is None:
        wanted = {name: None for name in broker.topics.names()}
    else:
        wanted = {t.topic: set(t.partitions) for t in requested}
    topics = []
    for name, indexes in wanted.items():
        topic = broker.topics.find(name)
        if topic is None:
            continue
        parts = [
            {"partition_index": p.index, "partition_size": p.log.size_bytes, "offset_lag": 0, "is_future_key": False}
            for p in topic.partitions.values()
            if (indexes is None or p.index in indexes) and p.log is not None  # an offline one has no size to tell
        ]
        topics.append({"name": name, "partitions": parts})
    log_dir = broker.config.data_dir.resolve()
    try:
        usage = shutil.disk_usage(log_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = {"error_code": 0, "log_dir": str(log_dir), "topics": topics,
              "total_bytes": total, "usable_bytes": usable}
    return build(response_class(ApiKey.DESCRIBE_LOG_DIRS, ctx.version),
                 {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]})
