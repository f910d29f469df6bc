"""AlterPartitionReassignments (45) v0 and ListPartitionReassignments (46) v0 (KIP-455).

A cluster member serves both only as the controller (elsewhere NOT_CONTROLLER, top-level:
clients send them to the controller Metadata names, as Kafka's admin clients do). The
controller validates each partition's target as Kafka's ZooKeeper-mode controller does
(UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist or whose topic is being
deleted; INVALID_REPLICA_ASSIGNMENT for an empty list, a broker twice, a negative id or a
replica to add that is not a live broker; NO_REASSIGNMENT_IN_PROGRESS for a cancel, null
replicas, of a partition not being reassigned) and writes the reassignment into the topic's
znode before answering; the reassignment then proceeds in the background (see
:mod:`pulllog.cluster.controller`). The list answers the partitions being reassigned, with
their full replica set and the replicas being added and removed; a partition asked for that
is not being reassigned is left out, as in Kafka.

A single broker is a one-broker cluster: its only replica set is itself (a target of its own
id alone is accepted and changes nothing, any other broker is not alive), and nothing is
ever being reassigned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...cluster.controller import ReplicaAssignment, validate_reassignment
from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

_CODES = {
    "UNKNOWN_TOPIC_OR_PARTITION": ErrorCode.unknown_topic_or_partition,
    "INVALID_REPLICA_ASSIGNMENT": ErrorCode.invalid_replica_assignment,
    "NO_REASSIGNMENT_IN_PROGRESS": ErrorCode.no_reassignment_in_progress,
    "REQUEST_TIMED_OUT": ErrorCode.request_timed_out,
}

Outcome = tuple[ErrorCode, str | None]


async def _on_controller(call: Callable[[Any], Any], argument: Any) -> tuple[Any, Outcome]:
    """``call(argument)`` on a worker thread (it talks to ZooKeeper), and the request's top-level
    outcome: NOT_CONTROLLER from a broker that is not, REQUEST_TIMED_OUT (which clients retry)
    when ZooKeeper does not answer; kazoo's timeout is no KazooException, so both are caught."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from ...cluster.errors import NotControllerError

    try:
        return await asyncio.to_thread(call, argument), (ErrorCode.none, None)
    except NotControllerError as exc:
        return None, (ErrorCode.not_controller, str(exc))
    except (KazooException, KazooTimeoutError) as exc:
        return None, (ErrorCode.request_timed_out, f"ZooKeeper did not answer ({exc}); try again")


@handler(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter(broker: "BrokerApi", ctx: RequestContext) -> Any:
    requested: dict[tuple[str, int], tuple[int, ...] | None] = {}
    for topic in ctx.body.topics:
        for p in topic.partitions:
            requested[(topic.name, int(p.partition_index))] = (
                None if p.replicas is None else tuple(int(r) for r in p.replicas))
    top: Outcome = (ErrorCode.none, None)
    results: dict[tuple[str, int], Outcome] = {}
    if broker.membership is None:
        results = {tp: _single_broker(broker, tp, target) for tp, target in requested.items()}
    else:
        outcome, top = await _on_controller(broker.membership.alter_partition_reassignments, requested)
        if outcome is not None:
            results = {tp: (ErrorCode.none, None) if error is None else
                       (_CODES.get(error.code, ErrorCode.unknown_server_error), error.message)
                       for tp, error in outcome.items()}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    if top[0] == ErrorCode.none:
        for (topic, partition), (code, message) in results.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code, "error_message": message})
    return build(response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ctx.version), {
        "throttle_time": 0, "error_code": top[0], "error_message": top[1],
        "responses": [{"name": t, "partitions": entries} for t, entries in by_topic.items()]})


@handler(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_(broker: "BrokerApi", ctx: RequestContext) -> Any:
    topics = ctx.body.topics
    wanted = None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    top: Outcome = (ErrorCode.none, None)
    ongoing: dict[tuple[str, int], Any] = {}
    if broker.membership is not None:
        found, top = await _on_controller(broker.membership.list_partition_reassignments, wanted)
        ongoing = found or {}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), assignment in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "replicas": list(assignment.replicas),
            "adding_replicas": list(assignment.adding), "removing_replicas": list(assignment.removing)})
    return build(response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, ctx.version), {
        "throttle_time": 0, "error_code": top[0], "error_message": top[1],
        "topics": [{"name": t, "partitions": entries} for t, entries in by_topic.items()]})


def _single_broker(broker: "BrokerApi", tp: tuple[str, int], target: tuple[int, ...] | None) -> Outcome:
    topic, partition = tp
    found = broker.topics.find(topic)
    if found is None or partition not in found.partitions:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    node = broker.config.node_id
    if target is None:
        return ErrorCode.no_reassignment_in_progress, f"no reassignment of {topic}-{partition} is in progress"
    # the controller's checks, for a cluster of one: this broker is the only live one
    why = validate_reassignment(target, ReplicaAssignment((node,)), {node})
    if why is not None:
        return ErrorCode.invalid_replica_assignment, why
    return ErrorCode.none, None
