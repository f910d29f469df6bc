"""Broker configuration under Kafka's names (``server.properties``).

Values come, lowest precedence first, from the defaults here, a properties file
(``--config FILE``), then keyword overrides. Broker-level ``log.*`` settings are the defaults
of every topic's ``LogConfig`` (``log.segment.bytes`` -> ``segment.bytes`` and so on), as
in Kafka.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..log.config import ConfigError, LogConfig

__all__ = ["BrokerConfig", "ConfigError", "parse_properties", "parse_hostport"]

# broker name -> topic (LogConfig) name
_LOG_DEFAULTS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "compression.type": "compression.type",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
}
_HOURS = {"log.retention.hours": "retention.ms", "log.roll.hours": "segment.ms"}
_MINUTES = {"log.retention.minutes": "retention.ms"}


def parse_hostport(text: str, default_port: int = 9092) -> tuple[str, int]:
    """'127.0.0.1:9092', 'PLAINTEXT://host:9092', '[::1]:9092' or ':9092'."""
    value = text.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            host, port = value, ""
    try:
        port_num = int(port) if port else default_port
    except ValueError:
        raise ConfigError(f"{text!r}: the port must be a number, as in 127.0.0.1:9092") from None
    if not 0 <= port_num <= 65535:
        raise ConfigError(f"{text!r}: port {port_num} is out of range")
    return host or "127.0.0.1", port_num


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties as Kafka uses them: key=value or key: value, # and ! comments."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                out[key.strip()] = value.strip()
                break
        else:
            raise ConfigError(f"line {number}: expected key=value, got {raw!r}")
    return out


def _int(name: str, raw: Any, lo: int = 0, hi: int = 2**63 - 1) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a whole number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value}: must be between {lo} and {hi}")
    return value


def _bool(name: str, raw: Any) -> bool:
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}={raw!r}: must be true or false")
    return value == "true"


@dataclass(frozen=True)
class BrokerConfig:
    data_dir: Path = Path("pulllog-data")
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 104857600
    max_connections: int = 2**31 - 1
    queued_max_requests: int = 500  # per connection: frames read ahead before reading pauses
    retention_check_interval_ms: int = 300_000
    flush_scheduler_interval_ms: int = 1_000
    cleaner_backoff_ms: int = 15_000
    offsets_topic_num_partitions: int = 50
    # Kafka's default is 3000, but the server.properties Kafka ships sets 0 for development;
    # pulllog is often a development broker, so 0 (set it for production-like behaviour).
    group_initial_rebalance_delay_ms: int = 0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    log_defaults: LogConfig = field(default_factory=LogConfig)

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    @property
    def message_max_bytes(self) -> int:
        return self.log_defaults.max_message_bytes

    @classmethod
    def load(
        cls,
        properties: Mapping[str, str] | None = None,
        *,
        config_file: str | os.PathLike[str] | None = None,
        **overrides: Any,
    ) -> "BrokerConfig":
        values: dict[str, str] = {}
        if config_file is not None:
            try:
                values.update(parse_properties(Path(config_file).read_text()))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from None
        values.update(properties or {})
        config = cls.from_properties(values)
        known = {f.name for f in fields(cls)}
        bad = set(overrides) - known
        if bad:
            raise ConfigError(f"unknown broker option(s): {', '.join(sorted(bad))}")
        return replace(config, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> "BrokerConfig":
        kw: dict[str, Any] = {}
        log_values: dict[str, str] = {}
        for name, raw in values.items():
            if name in _LOG_DEFAULTS:
                log_values[_LOG_DEFAULTS[name]] = raw
            elif name in _HOURS:
                log_values.setdefault(_HOURS[name], str(_int(name, raw, -1) * 3_600_000))
            elif name in _MINUTES:
                log_values.setdefault(_MINUTES[name], str(_int(name, raw, -1) * 60_000))
            elif name in ("log.dirs", "log.dir"):
                kw["data_dir"] = Path(str(raw).split(",")[0].strip())
            elif name == "listeners":
                kw["host"], kw["port"] = parse_hostport(str(raw).split(",")[0])
            elif name == "advertised.listeners":
                kw["advertised_host"], kw["advertised_port"] = parse_hostport(str(raw).split(",")[0])
            elif name in ("node.id", "broker.id"):
                kw["node_id"] = _int(name, raw, 0, 2**31 - 1)
            elif name == "num.partitions":
                kw["num_partitions"] = _int(name, raw, 1, 100_000)
            elif name == "default.replication.factor":
                kw["default_replication_factor"] = _int(name, raw, 1, 32767)
            elif name == "auto.create.topics.enable":
                kw["auto_create_topics"] = _bool(name, raw)
            elif name == "socket.request.max.bytes":
                kw["socket_request_max_bytes"] = _int(name, raw, 1024, 2**31 - 1)
            elif name == "max.connections":
                kw["max_connections"] = _int(name, raw, 1, 2**31 - 1)
            elif name == "queued.max.requests":
                kw["queued_max_requests"] = _int(name, raw, 1, 1_000_000)
            elif name == "log.retention.check.interval.ms":
                kw["retention_check_interval_ms"] = _int(name, raw, 1)
            elif name == "log.flush.scheduler.interval.ms":
                kw["flush_scheduler_interval_ms"] = _int(name, raw, 1)
            elif name == "log.cleaner.backoff.ms":
                kw["cleaner_backoff_ms"] = _int(name, raw, 1)
            elif name == "offsets.topic.num.partitions":
                kw["offsets_topic_num_partitions"] = _int(name, raw, 1, 10_000)
            elif name == "offsets.retention.minutes":
                kw["offsets_retention_ms"] = _int(name, raw, 1) * 60_000
            elif name == "offsets.retention.check.interval.ms":
                kw["offsets_retention_check_interval_ms"] = _int(name, raw, 1)
            elif name == "producer.id.expiration.ms":
                kw["producer_id_expiration_ms"] = _int(name, raw, 1)
            elif name == "producer.id.expiration.check.interval.ms":
                kw["producer_id_expiration_check_interval_ms"] = _int(name, raw, 1)
            elif name == "group.initial.rebalance.delay.ms":
                kw["group_initial_rebalance_delay_ms"] = _int(name, raw, 0)
            else:
                raise ConfigError(f"unknown broker config {name!r}")
        kw["log_defaults"] = LogConfig.from_kafka(log_values)
        return cls(**kw)

    def describe(self) -> dict[str, str]:
        """Broker configs as DescribeConfigs (resource type BROKER) reports them."""
        out = {
            "node.id": str(self.node_id),
            "broker.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": "PLAINTEXT://%s:%d" % self.advertised,
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "max.connections": str(self.max_connections),
            "queued.max.requests": str(self.queued_max_requests),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "log.flush.scheduler.interval.ms": str(self.flush_scheduler_interval_ms),
            "offsets.topic.num.partitions": str(self.offsets_topic_num_partitions),
            "offsets.retention.minutes": str(self.offsets_retention_ms // 60_000),
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "producer.id.expiration.ms": str(self.producer_id_expiration_ms),
            "producer.id.expiration.check.interval.ms": str(self.producer_id_expiration_check_interval_ms),
        }
        topic_values = self.log_defaults.to_kafka()
        for broker_name, topic_name in _LOG_DEFAULTS.items():
            out[broker_name] = topic_values[topic_name]
        return out
