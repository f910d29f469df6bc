"""CreatePartitions (37): grow a topic's partition count (never shrink). A manual replica
assignment is accepted when every new partition is on this broker, as Kafka checks it.

Past max.broker.partitions: POLICY_VIOLATION (Kafka 4.1 answers UNKNOWN_SERVER_ERROR for
100,000 new partitions). An internal topic keeps its count: __consumer_offsets maps a group
to a partition by the count, so more partitions would hide committed offsets (INVALID_REQUEST).
All new partitions or none: a storage failure answers KAFKA_STORAGE_ERROR, the count unchanged.
A topic that is offline (a degraded start: its topic file or, for an internal topic, a
partition could not be opened) answers KAFKA_STORAGE_ERROR too, naming why: its topic file is
not rewritten until a restart opens it. (Kafka's controller would add the partitions on a
healthy log dir; one broker with one data directory has none.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import INTERNAL_TOPICS, PolicyViolationError, TopicOfflineError, UnknownTopicError
from . import RequestContext, handler
from .create_topics import assignment_problem
from .errors import storage_problem

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    if broker.membership is not None:  # a cluster member: through ZooKeeper (see cluster_admin)
        from .cluster_admin import create_partitions

        answers = await create_partitions(broker, body.topics, bool(body.validate_only), body.timeout.total_seconds())
        return build(response_class(ApiKey.CREATE_PARTITIONS, ctx.version), {"throttle_time": 0, "results": answers})
    results = []
    for t in body.topics:
        if t.name in INTERNAL_TOPICS and broker.topics.find(t.name) is not None:
            results.append({"name": t.name, "error_code": ErrorCode.invalid_request,
                            "error_message": f"{t.name} is an internal topic: its partition count cannot change"})
            continue
        try:
            topic = broker.topics.find(t.name)
            if t.assignments is not None and topic is not None and t.count > topic.count:
                existing = topic.count
                problem = (f"{len(t.assignments)} assignments for {t.count - existing} new partitions"
                           if len(t.assignments) != t.count - existing else
                           assignment_problem(broker, list(range(existing, t.count)),
                                              [list(a.broker_ids) for a in t.assignments], first_partition=existing))
                if problem:
                    results.append({"name": t.name, "error_code": ErrorCode.invalid_replica_assignment,
                                    "error_message": problem})
                    continue
            broker.topics.add_partitions(t.name, t.count, validate_only=bool(body.validate_only))
            results.append({"name": t.name, "error_code": 0, "error_message": None})
        except UnknownTopicError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": str(exc)})
        except TopicOfflineError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.kafka_storage_error, "error_message": str(exc)})
        except PolicyViolationError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.policy_violation, "error_message": str(exc)})
        except OSError as exc:  # the topic keeps its partitions (TopicManager.add_partitions undoes the rest)
            results.append({"name": t.name, "error_code": ErrorCode.kafka_storage_error,
                            "error_message": f"cannot add partitions to {t.name!r}: {storage_problem(exc)}"})
        except ValueError as exc:
            results.append({"name": t.name, "error_code": ErrorCode.invalid_partitions, "error_message": str(exc)})
    return build(response_class(ApiKey.CREATE_PARTITIONS, ctx.version), {"throttle_time": 0, "results": results})
