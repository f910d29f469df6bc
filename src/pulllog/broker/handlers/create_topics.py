"""CreateTopics (19): validated as Kafka does (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_CONFIG, INVALID_TOPIC_EXCEPTION), with validate_only.

More partitions than the broker serves (max.broker.partitions) answer POLICY_VIOLATION, as
Kafka answers a request for more partitions than its controller takes at once. An internal
topic (__consumer_offsets) is the broker's to create: INVALID_REQUEST, Kafka's code for its
own __cluster_metadata (Kafka 4.1 lets a client create __consumer_offsets before the broker
does, with any config; pulllog does not). A topic is created whole or not at all: a storage
failure answers KAFKA_STORAGE_ERROR and leaves nothing on disk."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import ConfigError
from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import INTERNAL_TOPICS, InvalidTopicError, PolicyViolationError, TopicExistsError
from . import RequestContext, handler
from .configs import topic_config_entries
from .errors import storage_problem

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.CREATE_TOPICS, 2, 7)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    validate_only = bool(getattr(body, "validate_only", False))
    if broker.membership is not None:  # a cluster member: through ZooKeeper (see cluster_admin)
        from .cluster_admin import create_topics

        results = await create_topics(broker, body.topics, validate_only, body.timeout.total_seconds())
        return build(response_class(ApiKey.CREATE_TOPICS, ctx.version), {"throttle_time": 0, "topics": results})
    results = []
    seen: set[str] = set()
    for t in body.topics:
        results.append(create_one(broker, t, validate_only, duplicate=t.name in seen))
        seen.add(t.name)
    return build(response_class(ApiKey.CREATE_TOPICS, ctx.version), {"throttle_time": 0, "topics": results})


def _error(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"name": name, "topic_id": None, "error_code": code, "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": []}


def assignment_problem(broker: "BrokerApi", indexes: list[int], replicas: list[list[int]], *,
                       first_partition: int) -> str | None:
    """Why a manual replica assignment cannot be kept here, or None: as Kafka, partitions are
    numbered on from ``first_partition`` and every replica list names live brokers (only this
    one, once, on a single broker)."""
    if sorted(indexes) != list(range(first_partition, first_partition + len(indexes))):
        return f"the assigned partitions must be numbered consecutively from {first_partition}"
    node = broker.config.node_id
    for index, brokers in zip(indexes, replicas):
        if brokers != [node]:
            return f"partition {index} is assigned to brokers {brokers}; the only broker is {node}"
    return None


def create_one(broker: "BrokerApi", t: Any, validate_only: bool, duplicate: bool) -> dict[str, Any]:
    name = t.name
    if duplicate:
        return _error(name, ErrorCode.invalid_request, f"topic {name!r} appears twice in the request")
    partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
    replication = broker.config.default_replication_factor if t.replication_factor == -1 else t.replication_factor
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            return _error(name, ErrorCode.invalid_request,
                          "give either a replica assignment or a partition count and replication factor, not both")
        problem = assignment_problem(broker, [a.partition_index for a in t.assignments],
                                     [list(a.broker_ids) for a in t.assignments], first_partition=0)
        if problem:
            return _error(name, ErrorCode.invalid_replica_assignment, problem)
        partitions, replication = len(t.assignments), 1
    if partitions < 1:
        return _error(name, ErrorCode.invalid_partitions, f"number of partitions must be at least 1, not {partitions}")
    if replication != 1:
        return _error(name, ErrorCode.invalid_replication_factor,
                      f"replication factor {replication} is larger than the 1 available broker")
    configs = {c.name: c.value for c in t.configs}
    if any(v is None for v in configs.values()):
        return _error(name, ErrorCode.invalid_config, "config values may not be null")
    if name in INTERNAL_TOPICS and broker.topics.find(name) is None:
        return _error(name, ErrorCode.invalid_request,
                      f"{name} is an internal topic: the broker creates it when it first needs it")
    try:
        config = broker.topics.check_new_topic(name, partitions, configs)
        if not validate_only:
            topic = broker.topics.create(name, partitions, configs)
            topic_id = topic.topic_id
        else:
            topic_id = None
    except TopicExistsError as exc:
        return _error(name, ErrorCode.topic_already_exists, str(exc))
    except InvalidTopicError as exc:
        return _error(name, ErrorCode.invalid_topic_exception, str(exc))
    except ConfigError as exc:
        return _error(name, ErrorCode.invalid_config, str(exc))
    except PolicyViolationError as exc:
        return _error(name, ErrorCode.policy_violation, str(exc))
    except OSError as exc:  # nothing is left of the topic (TopicManager.create undoes it)
        return _error(name, ErrorCode.kafka_storage_error, f"cannot create topic {name!r}: {storage_problem(exc)}")
    except ValueError as exc:
        return _error(name, ErrorCode.invalid_partitions, str(exc))
    entries = topic_config_entries(broker, config, set(configs))
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": partitions,
        "replication_factor": 1,
        "configs": [
            {"name": e["name"], "value": e["value"], "read_only": False,
             "config_source": e["config_source"], "is_sensitive": False}
            for e in entries
        ],
    }
