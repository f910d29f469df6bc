"""DeleteTopics (20): by name, or by topic id from v6.

An internal topic (__consumer_offsets: every committed offset) is not deleted:
INVALID_REQUEST. Kafka 4.1's broker deletes it (and its groups then find no coordinator);
Kafka's kafka-topics tool refuses to ask. A storage failure answers KAFKA_STORAGE_ERROR.

A topic that is offline (a degraded start) is deleted as Kafka deletes one whose log dir is
offline: the answer is NONE once its topic file is gone, and partition directories the OS
will not remove now go at the next start (Kafka: when the log dir is back, as stray logs)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import INTERNAL_TOPICS
from . import RequestContext, handler
from .errors import storage_problem

if TYPE_CHECKING:
    from ..api import BrokerApi
    from ..topics import OfflineTopic


@handler(ApiKey.DELETE_TOPICS, 1, 6)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    if ctx.version >= 6:
        requested = [(t.name, t.topic_id) for t in body.topics]
    else:
        requested = [(name, None) for name in body.topic_names]
    if broker.membership is not None:  # a cluster member: through ZooKeeper (see cluster_admin)
        from .cluster_admin import delete_topics

        answers = await delete_topics(broker, requested, ctx.version >= 6, body.timeout.total_seconds())
        return build(response_class(ApiKey.DELETE_TOPICS, ctx.version), {"throttle_time": 0, "responses": answers})
    responses = []
    for name, topic_id in requested:
        topic = None
        if name:
            topic = broker.topics.find(name)
        elif topic_id is not None and topic_id != uuid.UUID(int=0):
            topic = broker.topics.by_id(topic_id)
        if topic is None:
            offline = _find_offline(broker, name, topic_id)
            if offline is not None:
                responses.append(_delete_offline(broker, offline))
                continue
            code = ErrorCode.unknown_topic_id if (not name and ctx.version >= 6) else ErrorCode.unknown_topic_or_partition
            responses.append({"name": name, "topic_id": topic_id, "error_code": code,
                              "error_message": f"topic {name or topic_id} does not exist"})
            continue
        if topic.name in INTERNAL_TOPICS:
            responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.invalid_request,
                              "error_message": f"{topic.name} is an internal topic (the groups' committed "
                                               "offsets): it cannot be deleted; delete a group's offsets with "
                                               "DeleteGroups (pulllog group delete)"})
            continue
        try:
            broker.delete_topic(topic.name)
        except OSError as exc:
            responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.kafka_storage_error,
                              "error_message": f"cannot delete topic {topic.name!r}: {storage_problem(exc)}"})
            continue
        responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None})
    return build(response_class(ApiKey.DELETE_TOPICS, ctx.version), {"throttle_time": 0, "responses": responses})


def _find_offline(broker: "BrokerApi", name: str | None, topic_id: uuid.UUID | None) -> "OfflineTopic | None":
    offline = broker.topics.offline
    if name:
        return offline.get(name)
    if topic_id is not None and topic_id != uuid.UUID(int=0):
        return next((t for t in offline.values() if t.topic_id == topic_id), None)
    return None


def _delete_offline(broker: "BrokerApi", topic: "OfflineTopic") -> dict[str, Any]:
    answer: dict[str, Any] = {"name": topic.name, "topic_id": topic.topic_id or uuid.UUID(int=0)}
    if topic.name in INTERNAL_TOPICS:
        return {**answer, "error_code": ErrorCode.invalid_request,
                "error_message": f"{topic.name} is an internal topic: it cannot be deleted"}
    try:
        broker.topics.delete_offline(topic.name)
    except OSError as exc:
        return {**answer, "error_code": ErrorCode.kafka_storage_error,
                "error_message": f"cannot delete offline topic {topic.name!r}: {storage_problem(exc)}"}
    return {**answer, "error_code": 0, "error_message": None}
