"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics and
the broker. Topic config changes take effect at once on every partition's log; broker
configs are read-only here (they come from server.properties and the command line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import ConfigError, LogConfig
from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..topics import UnknownTopicError
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

TOPIC, BROKER = 2, 4
# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# config_type (KIP-569): the wire ids of Kafka's DescribeConfigsResponse.ConfigType.
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)

# The ConfigDef type Kafka declares for each config we report (topic configs under their
# topic names, broker configs under theirs); a tool such as the Java AdminClient shows it.
CONFIG_TYPES: dict[str, int] = {
    # topic configs (Kafka's LogConfig)
    "segment.bytes": INT, "segment.ms": LONG, "segment.index.bytes": INT, "index.interval.bytes": INT,
    "flush.messages": LONG, "flush.ms": LONG, "retention.ms": LONG, "retention.bytes": LONG,
    "cleanup.policy": LIST, "delete.retention.ms": LONG, "min.compaction.lag.ms": LONG,
    "max.compaction.lag.ms": LONG, "min.cleanable.dirty.ratio": DOUBLE, "max.message.bytes": INT,
    "message.timestamp.type": STRING, "compression.type": STRING, "file.delete.delay.ms": LONG,
    "preallocate": BOOLEAN, "unclean.leader.election.enable": BOOLEAN, "min.insync.replicas": INT,
    # broker configs (Kafka's KafkaConfig / ServerLogConfigs)
    "node.id": INT, "broker.id": INT, "listeners": STRING, "advertised.listeners": STRING,
    "log.dirs": STRING, "num.partitions": INT, "default.replication.factor": INT,
    "auto.create.topics.enable": BOOLEAN, "socket.request.max.bytes": INT, "max.connections": INT,
    "queued.max.requests": INT, "log.retention.check.interval.ms": LONG,
    "log.flush.scheduler.interval.ms": LONG, "offsets.topic.num.partitions": INT,
    "offsets.retention.minutes": INT, "group.initial.rebalance.delay.ms": INT,
    "producer.id.expiration.ms": INT, "producer.id.expiration.check.interval.ms": INT,
    "log.segment.bytes": INT, "log.roll.ms": LONG, "log.index.size.max.bytes": INT,
    "log.index.interval.bytes": INT, "log.flush.interval.messages": LONG, "log.flush.interval.ms": LONG,
    "log.retention.ms": LONG, "log.retention.bytes": LONG, "log.cleanup.policy": LIST,
    "log.cleaner.delete.retention.ms": LONG, "log.cleaner.min.compaction.lag.ms": LONG,
    "log.cleaner.min.cleanable.ratio": DOUBLE, "message.max.bytes": INT,
    "log.message.timestamp.type": STRING, "log.segment.delete.delay.ms": LONG,
}


def config_type(name: str) -> int:
    return CONFIG_TYPES.get(name, UNKNOWN)


def topic_config_entries(broker: "BrokerApi", config: LogConfig, overridden: set[str]) -> list[dict[str, Any]]:
    defaults = broker.config.log_defaults.to_kafka()
    out = []
    for name, value in config.to_kafka().items():
        if name in overridden:
            source = DYNAMIC_TOPIC_CONFIG
        elif value != LogConfig().to_kafka()[name] or defaults[name] != LogConfig().to_kafka()[name]:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        out.append({"name": name, "value": value, "config_source": source})
    return out


def _describe_one(broker: "BrokerApi", r: Any, version: int) -> dict[str, Any]:
    keys = set(r.configuration_keys) if r.configuration_keys else None
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_type == TOPIC:
        try:
            topic = broker.topics.get(r.resource_name)
        except UnknownTopicError as exc:
            return {**base, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": str(exc), "configs": []}
        entries = topic_config_entries(broker, topic.config, set(topic.overrides))
    elif r.resource_type == BROKER:
        if r.resource_name not in ("", str(broker.config.node_id)):
            return {**base, "error_code": ErrorCode.invalid_request,
                    "error_message": f"this is broker {broker.config.node_id}, not {r.resource_name}", "configs": []}
        described = broker.config.describe()
        # the port actually bound (port 0 means "any free port")
        described["listeners"] = f"PLAINTEXT://{broker.config.host}:{broker.port}"
        described["advertised.listeners"] = "PLAINTEXT://%s:%d" % broker.advertised
        entries = [{"name": k, "value": v, "config_source": STATIC_BROKER_CONFIG} for k, v in described.items()]
    else:
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"resource type {r.resource_type} is not supported", "configs": []}
    configs = []
    for e in entries:
        if keys is not None and e["name"] not in keys:
            continue
        configs.append({
            "name": e["name"], "value": e["value"], "read_only": r.resource_type == BROKER,
            "is_default": e["config_source"] == DEFAULT_CONFIG, "config_source": e["config_source"],
            "is_sensitive": False, "synonyms": [], "config_type": config_type(e["name"]), "documentation": None,
        })
    return {**base, "error_code": 0, "error_message": None, "configs": configs}


@handler(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe(broker: "BrokerApi", ctx: RequestContext) -> Any:
    results = [_describe_one(broker, r, ctx.version) for r in ctx.body.resources]
    return build(response_class(ApiKey.DESCRIBE_CONFIGS, ctx.version), {"throttle_time": 0, "results": results})


def _alter(broker: "BrokerApi", r: Any, new: dict[str, str], validate_only: bool) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_type == BROKER:
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": "broker configs are static in pulllog: edit server.properties and restart"}
    if r.resource_type != TOPIC:
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"resource type {r.resource_type} is not supported"}
    try:
        broker.topics.alter_config(r.resource_name, new, validate_only=validate_only)
    except UnknownTopicError as exc:
        return {**base, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": str(exc)}
    except ConfigError as exc:
        return {**base, "error_code": ErrorCode.invalid_config, "error_message": str(exc)}
    return {**base, "error_code": 0, "error_message": None}


@handler(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter(broker: "BrokerApi", ctx: RequestContext) -> Any:
    responses = []
    for r in ctx.body.resources:
        # AlterConfigs replaces the whole set of overrides
        new = {c.name: c.value for c in r.configs if c.value is not None}
        responses.append(_alter(broker, r, new, bool(ctx.body.validate_only)))
    return build(response_class(ApiKey.ALTER_CONFIGS, ctx.version), {"throttle_time": 0, "responses": responses})


@handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter(broker: "BrokerApi", ctx: RequestContext) -> Any:
    responses = []
    for r in ctx.body.resources:
        current: dict[str, str] = {}
        topic = broker.topics.find(r.resource_name) if r.resource_type == TOPIC else None
        if topic is not None:
            current = dict(topic.overrides)
        error = None
        for c in r.configs:
            if c.config_operation == SET:
                if c.value is None:
                    error = f"{c.name}: SET needs a value"
                    break
                current[c.name] = c.value
            elif c.config_operation == DELETE:
                current.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                if c.name != "cleanup.policy":
                    error = f"{c.name} is not a list config; APPEND and SUBTRACT apply to list configs only"
                    break
                existing = broker.topics.find(r.resource_name)
                base_value = current.get(c.name) or (
                    existing.config.cleanup_policy if existing is not None else "delete")
                items = [x for x in base_value.split(",") if x]
                for item in (c.value or "").split(","):
                    if c.config_operation == APPEND and item and item not in items:
                        items.append(item)
                    if c.config_operation == SUBTRACT and item in items:
                        items.remove(item)
                current[c.name] = ",".join(items)
            else:
                error = f"unknown config operation {c.config_operation}"
                break
        if error is not None:
            responses.append({"resource_type": r.resource_type, "resource_name": r.resource_name,
                              "error_code": ErrorCode.invalid_config, "error_message": error})
            continue
        responses.append(_alter(broker, r, current, bool(ctx.body.validate_only)))
    return build(response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.version), {"throttle_time": 0, "responses": responses})
