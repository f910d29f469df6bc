"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics and
the broker. Topic config changes take effect at once on every partition's log. Broker
configs come from server.properties and the command line; the broker-level log defaults
(Kafka's dynamic broker configs that pulllog implements) may also be set at run time, for
this broker (resource name: its id) or cluster-wide (resource name ""), and then apply at
once to every topic without an override of its own. Precedence, as Kafka's: topic override,
this broker's dynamic config, the cluster-wide dynamic default, server.properties, default.

A cluster member (``zookeeper.connect``) keeps topic overrides where Kafka's ZooKeeper mode
does, ``/config/topics/<topic>``: it describes a topic's config from its partition views (any
broker, replica of the topic or not) and alters it by writing that znode (a conditional
replace of the whole set); every broker's watch then applies the new overrides to its own
replicas' logs."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import ConfigError, LogConfig
from ...net.apis import ApiKey
from ...net.build import build, response_class
from ..config import LOG_DEFAULT_NAMES
from ..topics import UnknownTopicError
from . import RequestContext, handler
from .errors import storage_problem

if TYPE_CHECKING:
    from ..api import BrokerApi

TOPIC, BROKER = 2, 4
# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
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
    "auto.create.topics.enable": BOOLEAN, "start.with.offline.partitions": BOOLEAN,
    "socket.request.max.bytes": INT, "max.connections": INT,
    "queued.max.requests": INT, "log.retention.check.interval.ms": LONG,
    "log.flush.scheduler.interval.ms": LONG, "log.flush.offset.checkpoint.interval.ms": INT,
    "offsets.topic.num.partitions": INT,
    "offsets.retention.minutes": INT, "group.initial.rebalance.delay.ms": INT,
    "producer.id.expiration.ms": INT, "producer.id.expiration.check.interval.ms": INT,
    "log.max.open.files": INT, "log.segment.bytes": INT, "log.roll.ms": LONG, "log.index.size.max.bytes": INT,
    "log.index.interval.bytes": INT, "log.flush.interval.messages": LONG, "log.flush.interval.ms": LONG,
    "log.retention.ms": LONG, "log.retention.bytes": LONG, "log.cleanup.policy": LIST,
    "log.cleaner.delete.retention.ms": LONG, "log.cleaner.min.compaction.lag.ms": LONG,
    "log.cleaner.min.cleanable.ratio": DOUBLE, "message.max.bytes": INT,
    "log.message.timestamp.type": STRING, "log.segment.delete.delay.ms": LONG,
    "max.broker.partitions": INT,  # pulllog's (KIP-578's name)
    "transaction.max.timeout.ms": INT, "transaction.state.log.num.partitions": INT,
    "transaction.state.log.segment.bytes": INT, "transactional.id.expiration.ms": INT,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": INT,
    "transaction.remove.expired.transaction.cleanup.interval.ms": INT,
    "transaction.partition.verification.enable": BOOLEAN,
    "zookeeper.connect": STRING, "zookeeper.session.timeout.ms": INT, "zookeeper.connection.timeout.ms": INT,
    "auto.leader.rebalance.enable": BOOLEAN,
    "controlled.shutdown.enable": BOOLEAN, "controlled.shutdown.max.retries": INT,
    "controlled.shutdown.retry.backoff.ms": LONG,
    "leader.imbalance.check.interval.seconds": LONG, "leader.imbalance.per.broker.percentage": INT,
    "offsets.topic.replication.factor": SHORT, "transaction.state.log.replication.factor": SHORT,
    "transaction.state.log.min.isr": INT,
    "replica.lag.time.max.ms": LONG, "replica.fetch.wait.max.ms": INT, "replica.fetch.max.bytes": INT,
    "replica.fetch.backoff.ms": INT, "replica.high.watermark.checkpoint.interval.ms": LONG,
}


# A topic config's broker-level synonym (the broker default it falls back to), as Kafka's
# DescribeConfigs lists it with include_synonyms. Kafka lists a synonym only when it has a value:
# log.retention.ms, log.roll.ms and log.flush.interval.ms have none by default (their values
# come from log.retention.hours, log.roll.hours and flush.messages' absence), so retention.ms,
# segment.ms and flush.ms show no default synonym.
BROKER_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes", "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy", "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio", "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type", "compression.type": "compression.type",
    "file.delete.delay.ms": "log.segment.delete.delay.ms", "preallocate": "log.preallocate",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
}
_NO_BROKER_DEFAULT = frozenset({"segment.ms", "flush.ms", "retention.ms"})


# What Kafka lists last for these when any other synonym is listed: the hours setting their
# milliseconds fall back to (its default).
_HOURS_FALLBACK = {"retention.ms": "log.retention.hours", "segment.ms": "log.roll.hours"}


def topic_synonyms(broker: "BrokerApi", name: str, value: str, source: int) -> list[dict[str, Any]]:
    """Where a topic config's value comes from, most specific first: the topic's override,
    then the broker's dynamic settings, its setting from server.properties, Kafka's default."""
    out = []
    if source == DYNAMIC_TOPIC_CONFIG:
        out.append({"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
    broker_name = BROKER_SYNONYMS.get(name)
    if broker_name is None:
        return out
    out += broker_synonyms(broker, broker_name, name)
    if out and name in _HOURS_FALLBACK:
        out.append({"name": _HOURS_FALLBACK[name], "value": "168", "source": DEFAULT_CONFIG})
    return out


def broker_synonyms(broker: "BrokerApi", broker_name: str, topic_name: str) -> list[dict[str, Any]]:
    """A broker-level log default's values, most specific first: this broker's dynamic
    setting, the cluster-wide one, server.properties, Kafka's default (when it has one)."""
    name = topic_name
    out = []
    for entity, level in ((str(broker.config.node_id), DYNAMIC_BROKER_CONFIG), ("", DYNAMIC_DEFAULT_BROKER_CONFIG)):
        dynamic = broker.topics.dynamic.get(entity, {}).get(broker_name)
        if dynamic is not None:
            out.append({"name": broker_name, "value": dynamic, "source": level})
    kafka_default = LogConfig().to_kafka().get(name)
    configured = broker.config.log_defaults.to_kafka().get(name)
    if configured is not None and configured != kafka_default:
        out.append({"name": broker_name, "value": configured, "source": STATIC_BROKER_CONFIG})
    if kafka_default is not None and name not in _NO_BROKER_DEFAULT:
        out.append({"name": broker_name, "value": kafka_default, "source": DEFAULT_CONFIG})
    return out


def config_type(name: str) -> int:
    return CONFIG_TYPES.get(name, UNKNOWN)


def _dynamic_source(broker: "BrokerApi", broker_name: str | None) -> int | None:
    """Where a broker-level log default comes from when it was set at run time, else None."""
    if broker_name is None:
        return None
    if broker_name in broker.topics.dynamic.get(str(broker.config.node_id), {}):
        return DYNAMIC_BROKER_CONFIG
    if broker_name in broker.topics.dynamic.get("", {}):
        return DYNAMIC_DEFAULT_BROKER_CONFIG
    return None


def topic_config_entries(broker: "BrokerApi", config: LogConfig, overridden: set[str]) -> list[dict[str, Any]]:
    defaults = broker.config.log_defaults.to_kafka()
    out = []
    for name, value in config.to_kafka().items():
        dynamic = _dynamic_source(broker, BROKER_SYNONYMS.get(name))
        if name in overridden:
            source = DYNAMIC_TOPIC_CONFIG
        elif dynamic is not None:
            source = dynamic
        elif value != LogConfig().to_kafka()[name] or defaults[name] != LogConfig().to_kafka()[name]:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        out.append({"name": name, "value": value, "config_source": source})
    return out


def _broker_entries(broker: "BrokerApi", described: dict[str, str]) -> list[dict[str, Any]]:
    """The broker's configs with the values in force: a dynamic one over server.properties."""
    entries = []
    for name, value in described.items():
        source = _dynamic_source(broker, name) if name in LOG_DEFAULT_NAMES else None
        if source is not None:
            entity = str(broker.config.node_id) if source == DYNAMIC_BROKER_CONFIG else ""
            value = broker.topics.dynamic[entity][name]
        entries.append({"name": name, "value": value, "config_source": source or STATIC_BROKER_CONFIG})
    return entries


def _describe_one(broker: "BrokerApi", r: Any, include_synonyms: bool) -> dict[str, Any]:
    keys = set(r.configuration_keys) if r.configuration_keys else None
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_type == TOPIC and broker.membership is not None:
        overrides = _cluster_overrides(broker, r.resource_name)
        if overrides is None:
            return {**base, "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": f"topic {r.resource_name!r} does not exist", "configs": []}
        entries = topic_config_entries(broker, LogConfig.from_kafka(overrides, broker.topics.defaults), set(overrides))
    elif r.resource_type == TOPIC:
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
        entries = _broker_entries(broker, described)
    else:
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"resource type {r.resource_type} is not supported", "configs": []}
    configs = []
    for e in entries:
        if keys is not None and e["name"] not in keys:
            continue
        name, value, source = e["name"], e["value"], e["config_source"]
        synonyms: list[dict[str, Any]] = []
        if include_synonyms and r.resource_type == TOPIC:
            synonyms = topic_synonyms(broker, name, value, source)
        elif include_synonyms and name in LOG_DEFAULT_NAMES:
            synonyms = broker_synonyms(broker, name, LOG_DEFAULT_NAMES[name])
        elif include_synonyms:
            synonyms = [{"name": name, "value": value, "source": source}]
        configs.append({
            "name": name, "value": value, "read_only": r.resource_type == BROKER and name not in LOG_DEFAULT_NAMES,
            "is_default": source == DEFAULT_CONFIG, "config_source": source,
            "is_sensitive": False, "synonyms": synonyms, "config_type": config_type(name), "documentation": None,
        })
    return {**base, "error_code": 0, "error_message": None, "configs": configs}


@handler(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe(broker: "BrokerApi", ctx: RequestContext) -> Any:
    include_synonyms = bool(getattr(ctx.body, "include_synonyms", False))
    results = [_describe_one(broker, r, include_synonyms) for r in ctx.body.resources]
    return build(response_class(ApiKey.DESCRIBE_CONFIGS, ctx.version), {"throttle_time": 0, "results": results})


def _cluster_overrides(broker: "BrokerApi", name: str) -> dict[str, str] | None:
    """A cluster topic's overrides as this broker's views have them (None: no such topic)."""
    view = broker.partition_views.get((name, 0))
    return None if view is None else dict(view.configs)


async def _alter_in_cluster(broker: "BrokerApi", r: Any, new: dict[str, str], validate_only: bool) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if _cluster_overrides(broker, r.resource_name) is None:
        return {**base, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"topic {r.resource_name!r} does not exist"}
    try:
        LogConfig.from_kafka(dict(new), broker.topics.defaults)
    except ConfigError as exc:
        return {**base, "error_code": ErrorCode.invalid_config, "error_message": str(exc)}
    if not validate_only:
        assert broker.membership is not None
        await asyncio.to_thread(broker.membership.write_topic_config, r.resource_name, new)
    return {**base, "error_code": 0, "error_message": None}


async def _alter(broker: "BrokerApi", r: Any, new: dict[str, str], validate_only: bool) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_type == BROKER:
        return _alter_broker(broker, r, new, validate_only)
    if r.resource_type != TOPIC:
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"resource type {r.resource_type} is not supported"}
    if broker.membership is not None:
        return await _alter_in_cluster(broker, r, new, validate_only)
    try:
        broker.topics.alter_config(r.resource_name, new, validate_only=validate_only)
    except UnknownTopicError as exc:
        return {**base, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": str(exc)}
    except ConfigError as exc:
        return {**base, "error_code": ErrorCode.invalid_config, "error_message": str(exc)}
    except OSError as exc:  # the topic file is written before the change takes effect: nothing changed
        return {**base, "error_code": ErrorCode.kafka_storage_error, "error_message": storage_problem(exc)}
    return {**base, "error_code": 0, "error_message": None}


def _alter_broker(broker: "BrokerApi", r: Any, new: dict[str, str], validate_only: bool) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if r.resource_name not in ("", str(broker.config.node_id)):
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"this is broker {broker.config.node_id}, not {r.resource_name}; "
                                 "name it, or \"\" for the cluster-wide default"}
    static = sorted(set(new) - set(LOG_DEFAULT_NAMES))
    if static:
        # As Kafka: a config that cannot change at run time is an invalid request.
        return {**base, "error_code": ErrorCode.invalid_request,
                "error_message": f"{', '.join(static)}: cannot be changed at run time; set it in server.properties "
                                 f"and restart (dynamic: {', '.join(sorted(LOG_DEFAULT_NAMES))})"}
    try:
        broker.topics.alter_broker_config(r.resource_name, new, validate_only=validate_only)
    except ConfigError as exc:
        # Kafka answers a bad broker config value INVALID_REQUEST (a topic's: INVALID_CONFIG).
        return {**base, "error_code": ErrorCode.invalid_request, "error_message": str(exc)}
    except OSError as exc:
        return {**base, "error_code": ErrorCode.kafka_storage_error, "error_message": storage_problem(exc)}
    return {**base, "error_code": 0, "error_message": None}


@handler(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter(broker: "BrokerApi", ctx: RequestContext) -> Any:
    responses = []
    for r in ctx.body.resources:
        # AlterConfigs replaces the whole set of overrides
        new = {c.name: c.value for c in r.configs if c.value is not None}
        responses.append(await _alter(broker, r, new, bool(ctx.body.validate_only)))
    return build(response_class(ApiKey.ALTER_CONFIGS, ctx.version), {"throttle_time": 0, "responses": responses})


@handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter(broker: "BrokerApi", ctx: RequestContext) -> Any:
    responses = []
    for r in ctx.body.resources:
        current: dict[str, str] = {}
        topic = broker.topics.find(r.resource_name) if r.resource_type == TOPIC else None
        if topic is not None:
            current = dict(topic.overrides)
        if r.resource_type == TOPIC and broker.membership is not None:
            current = _cluster_overrides(broker, r.resource_name) or {}
        if r.resource_type == BROKER:
            current = dict(broker.topics.dynamic.get(r.resource_name, {}))
        error = None
        code = ErrorCode.invalid_config
        for c in r.configs:
            if c.config_operation == SET:
                if c.value is None:
                    error, code = f"{c.name}: SET needs a value", ErrorCode.invalid_request  # as Kafka
                    break
                current[c.name] = c.value
            elif c.config_operation == DELETE:
                current.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                if c.name not in ("cleanup.policy", "log.cleanup.policy"):
                    error = f"{c.name} is not a list config; APPEND and SUBTRACT apply to list configs only"
                    break
                base_value = current.get(c.name) or (topic.config if topic is not None else broker.topics.defaults).cleanup_policy
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
                              "error_code": code, "error_message": error})
            continue
        responses.append(await _alter(broker, r, current, bool(ctx.body.validate_only)))
    return build(response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.version), {"throttle_time": 0, "responses": responses})
