"""Metadata (3): brokers, the controller, topics and their partitions (all led here).

A single broker lists itself as the one broker and the controller. A cluster member
(``zookeeper.connect``) lists every broker registered in ZooKeeper and the elected controller
(-1 between a controller's death and the next election), and every topic of the cluster from
its partition views, with their leaders, replicas and ISR (see cluster_admin).

Unknown topics are created when auto-creation is on (broker ``auto.create.topics.enable``
and the request's ``allow_auto_topic_creation``), as Kafka does for Metadata requests; not
Kafka's internal topics, which only the broker creates (the group coordinator creates
__consumer_offsets when a group first needs it). An auto-create past max.broker.partitions
answers POLICY_VIOLATION, one that fails on storage KAFKA_STORAGE_ERROR (nothing is created).

A partition that is offline (it could not be opened at a degraded start, see
broker/topics.py) is listed without a leader, as Kafka lists the partitions of a failed log
dir: LEADER_NOT_AVAILABLE, leader -1, this broker among the offline replicas; the topic's
other partitions as usual. A topic that is offline whole (its metadata file could not be
read) is listed the same way, every partition offline, and never auto-created again.
Produce and Fetch to an offline partition answer KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import INTERNAL_TOPICS, InvalidTopicError, OfflineTopic, PolicyViolationError, Topic, validate_topic_name
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

log = logging.getLogger(__name__)


# Authorized operations (KIP-430) as bit sets, bit n for AclOperation n. Without an authorizer
# Kafka allows every operation a resource supports: a topic READ(3), WRITE(4), CREATE(5),
# DELETE(6), ALTER(7), DESCRIBE(8), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11); the cluster
# CREATE(5), ALTER(7), DESCRIBE(8), CLUSTER_ACTION(9), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11),
# IDEMPOTENT_WRITE(12). INT32_MIN: the client did not ask.
NOT_REQUESTED = -(2**31)
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def topic_entry(broker: "BrokerApi", topic: Topic, *, operations: int = NOT_REQUESTED) -> dict[str, Any]:
    node = broker.config.node_id
    return {
        "topic_authorized_operations": operations,
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p.index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            } if p.log is not None else _offline_partition_entry(node, p.index)
            for p in topic.partitions.values()
        ],
    }


def _offline_partition_entry(node: int, index: int) -> dict[str, Any]:
    """A partition that could not be opened at a degraded start, as Kafka lists a partition
    whose only replica is on a failed log dir."""
    return {
        "error_code": ErrorCode.leader_not_available,
        "partition_index": index,
        "leader_id": -1,
        "leader_epoch": 0,
        "replica_nodes": [node],
        "isr_nodes": [node],
        "offline_replicas": [node],
    }


def offline_topic_entry(broker: "BrokerApi", topic: OfflineTopic, *,
                        operations: int = NOT_REQUESTED) -> dict[str, Any]:
    node = broker.config.node_id
    return {
        "topic_authorized_operations": operations,
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name.startswith("__"),
        "partitions": [_offline_partition_entry(node, index) for index in range(topic.partitions)],
    }


def broker_list(broker: "BrokerApi") -> tuple[list[dict[str, Any]], int]:
    """(the brokers as Metadata lists them, the controller's id)."""
    host, port = broker.advertised
    me = {"node_id": broker.config.node_id, "host": host, "port": port, "rack": None}
    view = broker.cluster_view
    if view is None:
        return [me], broker.config.node_id
    brokers = [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in view.brokers]
    if all(b.broker_id != me["node_id"] for b in view.brokers):
        # Registered but not yet seen by its own watch (or between a lost session and the
        # next): a client must still find the broker it is talking to.
        brokers.append(me)
    return brokers, view.controller_id


@handler(ApiKey.METADATA, 0, 12)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    version = ctx.version
    requested = body.topics
    if requested is None or (version == 0 and not requested):
        names = broker.topics.names() + list(broker.topics.offline)
    else:
        names = [t.name for t in requested if t.name is not None]
    allow_create = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics
    operations = TOPIC_OPERATIONS if getattr(body, "include_topic_authorized_operations", False) else NOT_REQUESTED
    topics = []
    if broker.membership is not None:  # a cluster member: every topic of the cluster, from ZooKeeper
        from .cluster_admin import metadata_topics

        every = requested is None or (version == 0 and not requested)
        topics = await metadata_topics(broker, None if every else names, allow_create, operations)
        names = []
    for name in names:
        topic = broker.topics.find(name)
        offline = broker.topics.offline.get(name) if topic is None else None
        if offline is not None:
            topics.append(offline_topic_entry(broker, offline, operations=operations))
            continue
        if topic is None and allow_create and name not in INTERNAL_TOPICS:  # only the broker creates those
            try:
                topic = broker.auto_create_topic(name)
            except InvalidTopicError:
                topics.append({"error_code": ErrorCode.invalid_topic_exception, "name": name, "partitions": []})
                continue
            except PolicyViolationError:
                topics.append({"error_code": ErrorCode.policy_violation, "name": name, "partitions": []})
                continue
            except OSError as exc:  # nothing was created (TopicManager.create undoes it)
                log.error("auto-creating topic %s failed: %s", name, exc)
                topics.append({"error_code": ErrorCode.kafka_storage_error, "name": name, "partitions": []})
                continue
        if topic is None:
            try:
                validate_topic_name(name)
                code = ErrorCode.unknown_topic_or_partition
            except InvalidTopicError:
                code = ErrorCode.invalid_topic_exception
            topics.append({"error_code": code, "name": name, "partitions": [], "topic_id": None})
            continue
        topics.append(topic_entry(broker, topic, operations=operations))
    brokers, controller_id = broker_list(broker)
    data = {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": broker.topics.cluster_id,
        "controller_id": controller_id,
        "topics": topics,
        "cluster_authorized_operations": CLUSTER_OPERATIONS if getattr(
            body, "include_cluster_authorized_operations", False) else NOT_REQUESTED,
    }
    return build(response_class(ApiKey.METADATA, version), data)
