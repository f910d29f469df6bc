"""Broker configuration under Kafka's names (``server.properties``).

Values come, lowest precedence first, from the defaults here, a properties file
(``--config FILE``), then keyword overrides. Broker-level ``log.*`` settings are the defaults
of every topic's ``LogConfig`` (``log.segment.bytes`` -> ``segment.bytes`` and so on), as
in Kafka.

A stock Kafka ``server.properties`` starts pulllog: Kafka's broker settings that do not apply
to a single-process broker without ZooKeeper, replication or security (``_IGNORED``, by the
reason they do not apply) are accepted and listed in ``BrokerConfig.ignored`` so the caller
can warn once per setting. A name that is neither pulllog's nor Kafka's is refused with the
closest known name. Errors always name the setting as the user wrote it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..log.config import ConfigError, LogConfig

__all__ = ["KAFKA_DEFAULTS", "KNOWN_NAMES", "LOG_DEFAULT_NAMES", "BrokerConfig", "ConfigError", "IgnoredSetting", "parse_properties", "parse_hostport"]

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
    # A cluster's broker-wide default; a topic's own override wins (the controller reads both).
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
# The broker log defaults that (Incremental)AlterConfigs may change at run time (Kafka's
# dynamic broker configs that pulllog implements), broker name -> topic config name.
LOG_DEFAULT_NAMES: Mapping[str, str] = MappingProxyType(_LOG_DEFAULTS)
_HOURS = {"log.retention.hours": "retention.ms", "log.roll.hours": "segment.ms"}
_MINUTES = {"log.retention.minutes": "retention.ms"}

# Kafka's broker config names (its KafkaConfig definitions, 3.x / 4.0) that pulllog accepts
# and ignores, grouped by why: a stock server.properties must start pulllog with one warning
# per setting, not be refused. Names pulllog implements are handled in from_properties.
_IGNORED_BY_REASON = {
    "pulllog is one broker: there is no replication": """
        auto.leader.rebalance.enable broker.rack
        follower.replication.throttled.rate leader.imbalance.check.interval.seconds
        leader.imbalance.per.broker.percentage leader.replication.throttled.rate
        num.replica.alter.log.dirs.threads num.replica.fetchers offsets.topic.replication.factor
        replica.fetch.min.bytes replica.fetch.response.max.bytes replica.selector.class
        replica.socket.receive.buffer.bytes replica.socket.timeout.ms replication.quota.window.num
        replication.quota.window.size.seconds alter.log.dirs.replication.quota.window.num
        alter.log.dirs.replication.quota.window.size.seconds replica.alter.log.dirs.io.max.bytes.per.second
        unclean.leader.election.enable eligible.leader.replicas.enable transaction.state.log.min.isr
        transaction.state.log.replication.factor share.coordinator.state.topic.min.isr
        share.coordinator.state.topic.replication.factor
        inter.broker.listener.name inter.broker.protocol.version security.inter.broker.protocol
        reserved.broker.max.id broker.id.generation.enable""",
    "pulllog keeps its metadata itself: there is no ZooKeeper or KRaft quorum": """
        process.roles controller.quorum.voters controller.quorum.bootstrap.servers
        controller.quorum.append.linger.ms controller.quorum.election.backoff.max.ms
        controller.quorum.election.timeout.ms controller.quorum.fetch.timeout.ms
        controller.quorum.request.timeout.ms controller.quorum.retry.backoff.ms
        controller.listener.names controller.quota.window.num controller.quota.window.size.seconds
        controller.socket.timeout.ms control.plane.listener.name broker.heartbeat.interval.ms
        broker.session.timeout.ms initial.broker.registration.timeout.ms metadata.log.dir
        metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms
        metadata.log.segment.bytes metadata.log.segment.ms metadata.max.idle.interval.ms
        metadata.max.retention.bytes metadata.max.retention.ms early.start.listeners""",
    "pulllog serves every connection on one event loop: there are no thread pools": """
        num.network.threads num.io.threads background.threads num.recovery.threads.per.data.dir
        log.cleaner.threads group.coordinator.threads share.coordinator.threads
        remote.log.reader.threads""",
    "pulllog leaves socket buffers and timeouts to the operating system": """
        socket.send.buffer.bytes socket.receive.buffer.bytes socket.listen.backlog.size
        connections.max.idle.ms connections.max.reauth.ms max.connections.per.ip
        max.connections.per.ip.overrides max.connection.creation.rate queued.max.request.bytes
        request.timeout.ms socket.connection.setup.timeout.ms socket.connection.setup.timeout.max.ms
        connection.failed.authentication.delay.ms""",
    "pulllog has no security (PLAINTEXT only): no TLS, SASL, ACLs or delegation tokens": """
        listener.security.protocol.map authorizer.class.name principal.builder.class
        security.providers delegation.token.expiry.check.interval.ms delegation.token.expiry.time.ms
        delegation.token.max.lifetime.ms delegation.token.secret.key password.encoder.cipher.algorithm
        password.encoder.iterations password.encoder.key.length password.encoder.keyfactory.algorithm
        password.encoder.old.secret password.encoder.secret""",
    "pulllog has no share groups yet": """
        share.coordinator.append.linger.ms share.coordinator.load.buffer.size
        share.coordinator.snapshot.update.records.per.snapshot share.coordinator.state.topic.compression.codec
        share.coordinator.state.topic.num.partitions share.coordinator.state.topic.segment.bytes
        share.coordinator.write.timeout.ms share.fetch.purgatory.purge.interval.requests""",
    "pulllog has no quotas, metrics reporters or pluggable policies": """
        quota.window.num quota.window.size.seconds client.quota.callback.class
        create.topic.policy.class.name alter.config.policy.class.name metric.reporters
        metrics.num.samples metrics.recording.level metrics.sample.window.ms
        kafka.metrics.polling.interval.secs kafka.metrics.reporters telemetry.max.bytes""",
    "pulllog's storage is tuned by other settings (or not yet tunable)": """
        log.cleaner.enable log.cleaner.dedupe.buffer.size log.cleaner.io.buffer.load.factor
        log.cleaner.io.buffer.size log.cleaner.io.max.bytes.per.second log.cleaner.max.compaction.lag.ms
        log.dir.failure.timeout.ms
        log.flush.start.offset.checkpoint.interval.ms log.initial.task.delay.ms log.preallocate
        log.roll.jitter.ms log.roll.jitter.hours log.message.format.version
        log.message.downconversion.enable log.message.timestamp.difference.max.ms
        log.message.timestamp.before.max.ms log.message.timestamp.after.max.ms
        log.local.retention.ms log.local.retention.bytes compression.gzip.level compression.lz4.level
        compression.zstd.level offsets.topic.segment.bytes offsets.topic.compression.codec
        offsets.load.buffer.size offsets.commit.timeout.ms offset.metadata.max.bytes
        transaction.state.log.load.buffer.size
        delete.topic.enable fetch.max.bytes max.incremental.fetch.session.cache.slots
        max.request.partition.size.limit fetch.purgatory.purge.interval.requests
        producer.purgatory.purge.interval.requests delete.records.purgatory.purge.interval.requests
        remote.fetch.max.wait.ms remote.list.offsets.request.timeout.ms""",
    "pulllog's group coordinator has fixed limits (the classic protocol only)": """
        group.min.session.timeout.ms group.max.session.timeout.ms group.max.size
        group.coordinator.rebalance.protocols group.coordinator.append.linger.ms""",
}
# Whole families of Kafka settings, by prefix, for the same reasons.
_IGNORED_PREFIXES = {
    "zookeeper.": "pulllog's cluster uses zookeeper.connect and its two timeouts only (no TLS, SASL or ACLs)",
    "ssl.": "pulllog has no security (PLAINTEXT only): no TLS, SASL, ACLs or delegation tokens",
    "sasl.": "pulllog has no security (PLAINTEXT only): no TLS, SASL, ACLs or delegation tokens",
    "listener.name.": "pulllog has no security (PLAINTEXT only): no TLS, SASL, ACLs or delegation tokens",
    "remote.log.": "pulllog has no tiered storage",
    "group.consumer.": "pulllog's group coordinator has fixed limits (the classic protocol only)",
    "group.share.": "pulllog has no share groups yet",
}
# The cluster's settings (issue 16) that a cluster member uses; a single broker keeps their
# values and has no use for them.
_CLUSTER = (
    "unclean.leader.election.enable", "auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage", "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
)
_IGNORED: dict[str, str] = {
    name: reason for reason, names in _IGNORED_BY_REASON.items() for name in names.split() if name not in _CLUSTER
}


@dataclass(frozen=True)
class IgnoredSetting:
    """A Kafka broker setting pulllog accepted without using it, and why it does not apply."""

    name: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"ignoring {self.name}={self.value}: {self.reason}"


def _ignored_reason(name: str) -> str | None:
    if name in _IGNORED:
        return _IGNORED[name]
    for prefix, reason in _IGNORED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


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


# Kafka's transaction settings that are integers: name -> (BrokerConfig field, min, max).
_TRANSACTION_INTS: dict[str, tuple[str, int, int]] = {
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", 1, 2**31 - 1),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", 1, 10_000),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", 1024, 2**31 - 1),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", 1, 2**31 - 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        ("transaction_abort_timed_out_transaction_cleanup_interval_ms", 1, 2**31 - 1),
    "transaction.remove.expired.transaction.cleanup.interval.ms":
        ("transaction_remove_expired_transaction_cleanup_interval_ms", 1, 2**31 - 1),
}

# Replication's settings (a cluster member's replica manager): name -> (field, min, max).
_REPLICA_INTS: dict[str, tuple[str, int, int]] = {
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", 1, 2**31 - 1),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", 0, 2**31 - 1),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", 0, 2**31 - 1),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", 0, 2**31 - 1),
    "replica.high.watermark.checkpoint.interval.ms": ("replica_high_watermark_checkpoint_interval_ms", 1, 2**31 - 1),
}


# Broker settings pulllog implements besides _LOG_DEFAULTS, _HOURS and _MINUTES (from_properties).
_OWN = (
    "log.dirs", "log.dir", "listeners", "advertised.listeners", "node.id", "broker.id", "num.partitions",
    "default.replication.factor", "auto.create.topics.enable", "socket.request.max.bytes", "max.connections",
    "queued.max.requests", "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms", "log.cleaner.backoff.ms", "offsets.topic.num.partitions",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms", "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
    "group.initial.rebalance.delay.ms", "start.with.offline.partitions", "log.max.open.files", "max.broker.partitions",
    *_TRANSACTION_INTS, "transaction.partition.verification.enable", *_REPLICA_INTS,
    "zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms", *_CLUSTER,
)
KNOWN_NAMES: frozenset[str] = frozenset((*_LOG_DEFAULTS, *_HOURS, *_MINUTES, *_OWN, *_IGNORED))


# Kafka's defaults where a broker built in code uses another value (see BrokerConfig.load).
KAFKA_DEFAULTS: dict[str, str] = {"group.initial.rebalance.delay.ms": "3000"}


def _unknown(name: str) -> str:
    """'unknown broker config ...' with the closest name pulllog or Kafka knows."""
    close = difflib.get_close_matches(name, sorted(KNOWN_NAMES), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; pulllog takes Kafka's broker config names"
    return f"unknown broker config {name!r}{hint}"


def _check_log_value(name: str, raw: Any) -> None:
    """Validate a broker ``log.*`` value now, so the error names the broker setting the user
    wrote (message.max.bytes), not the topic config it becomes (max.message.bytes)."""
    topic_name = _LOG_DEFAULTS[name]
    try:
        LogConfig.from_kafka({topic_name: raw})
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(name + text[len(topic_name):] if text.startswith(topic_name) else text) from None


def _zookeeper_connect(raw: str) -> str:
    """zookeeper.connect, checked now so a typo stops the start with the setting's name."""
    hosts = raw.strip().partition("/")[0]
    if not hosts or any(":" not in h or not h.rpartition(":")[2].strip().isdigit() for h in hosts.split(",")):
        raise ConfigError(f"zookeeper.connect={raw!r}: expected HOST:PORT[,HOST:PORT...][/chroot], "
                          "e.g. 127.0.0.1:2181/pulllog")
    return raw.strip()


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
    # The most partitions this broker serves (internal topics aside): CreateTopics and
    # CreatePartitions past it answer POLICY_VIOLATION up front (the name is KIP-578's).
    max_broker_partitions: int = 20_000
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    # pulllog's own: a topic that cannot be opened at start stops the start (Kafka's rule for
    # a broker with one log dir), unless this is true: then the partitions that failed are
    # offline and the rest served.
    start_with_offline_partitions: bool = False
    socket_request_max_bytes: int = 104857600
    max_connections: int = 2**31 - 1
    queued_max_requests: int = 500  # per connection: frames read ahead before reading pauses
    retention_check_interval_ms: int = 300_000
    flush_scheduler_interval_ms: int = 1_000
    # How often every log's recovery point goes to recovery-point-offset-checkpoint (Kafka's default).
    flush_offset_checkpoint_interval_ms: int = 60_000
    cleaner_backoff_ms: int = 15_000
    offsets_topic_num_partitions: int = 50
    # 0 for a broker built in code (tests, BrokerThread, embedding): a group forms at once.
    # ``pulllog serve`` loads with ``kafka_defaults=True`` and so gets Kafka's 3000 ms, during
    # which a new group waits for more members: with 0, a group of several cooperative
    # consumers hands every partition to the first joiner and then moves them.
    group_initial_rebalance_delay_ms: int = 0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    # The transaction coordinator (txn/), Kafka's names and defaults:
    # transaction.max.timeout.ms: a producer asking for a longer transaction.timeout.ms gets
    # INVALID_TRANSACTION_TIMEOUT from InitProducerId.
    transaction_max_timeout_ms: int = 900_000
    # transaction.state.log.num.partitions / .segment.bytes: __transaction_state, created on first use.
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    # transactional.id.expiration.ms: an id with no transaction for this long is forgotten.
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # How often open transactions past their timeout are aborted, and expired ids removed.
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # transaction.partition.verification.enable (KIP-890): a transactional Produce to a partition
    # not added to the producer's transaction is refused (INVALID_TXN_STATE).
    transaction_partition_verification_enable: bool = True
    # Segment files (.log/.index/.timeindex) held open at once, like RocksDB's max_open_files;
    # 0: derived at start from RLIMIT_NOFILE (see broker/limits.py). Not a Kafka setting.
    max_open_files: int = 0
    log_defaults: LogConfig = field(default_factory=LogConfig)
    # A cluster member (pulllog.cluster): ZooKeeper's HOST:PORT[,HOST:PORT...][/chroot]. None (the
    # default): a single broker that needs no ZooKeeper and imports nothing of the cluster.
    zookeeper_connect: str | None = None
    # Kafka's names and defaults: a broker whose session is silent this long is gone (its
    # registration and, if it was the controller, /controller vanish); the connection
    # timeout (default: the session timeout) bounds the wait for ZooKeeper at start.
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int | None = None
    # The cluster's controller (Kafka's names and defaults): a periodic preferred-leader election
    # for brokers leading fewer of their preferred partitions than the percentage allows.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Controlled shutdown (Kafka's names and defaults): on a clean stop a cluster member asks
    # the controller to move the leadership of its partitions to other in-sync replicas and
    # take it out of the ISRs first, up to max.retries times, retry.backoff.ms apart; then it
    # stops anyway. False: it just leaves, and the controller elects once its session ends.
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5_000
    # Replicas of the internal topics in a cluster (Kafka's ZooKeeper mode: their creation
    # fails until that many brokers are live). A single broker keeps one replica.
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    # min.insync.replicas of __transaction_state in a cluster (Kafka's default 2): a
    # coordinator's write with fewer replicas in sync fails rather than resting on one copy.
    transaction_state_log_min_isr: int = 2
    # Replication (Kafka's names and defaults): a follower that has not caught up for
    # replica.lag.time.max.ms leaves the ISR; followers long-poll their leader for up to
    # replica.fetch.wait.max.ms, replica.fetch.max.bytes per partition, and retry a failed
    # fetch after replica.fetch.backoff.ms; high watermarks are checkpointed this often.
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_backoff_ms: int = 1_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    # Kafka settings that were given but do not apply to pulllog: the caller warns about each.
    ignored: tuple[IgnoredSetting, ...] = field(default=(), compare=False)

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
        kafka_defaults: bool = False,
        **overrides: Any,
    ) -> "BrokerConfig":
        """The config from ``config_file``, then ``properties``, then ``overrides``. With
        ``kafka_defaults``, settings given nowhere take Kafka's default where pulllog's own
        default differs (KAFKA_DEFAULTS), as a broker run from the command line should."""
        values: dict[str, str] = dict(KAFKA_DEFAULTS) if kafka_defaults else {}
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
        ignored: list[IgnoredSetting] = []
        for name, raw in values.items():
            if name in _LOG_DEFAULTS:
                _check_log_value(name, raw)
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
            elif name == "max.broker.partitions":
                kw["max_broker_partitions"] = _int(name, raw, 1, 10_000_000)
            elif name == "default.replication.factor":
                kw["default_replication_factor"] = _int(name, raw, 1, 32767)
            elif name == "auto.create.topics.enable":
                kw["auto_create_topics"] = _bool(name, raw)
            elif name == "start.with.offline.partitions":
                kw["start_with_offline_partitions"] = _bool(name, raw)
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
            elif name == "log.flush.offset.checkpoint.interval.ms":
                kw["flush_offset_checkpoint_interval_ms"] = _int(name, raw, 1)
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
            elif name in _TRANSACTION_INTS:
                field_name, low, high = _TRANSACTION_INTS[name]
                kw[field_name] = _int(name, raw, low, high)
            elif name == "transaction.partition.verification.enable":
                kw["transaction_partition_verification_enable"] = _bool(name, raw)
            elif name in _REPLICA_INTS:
                field_name, low, high = _REPLICA_INTS[name]
                kw[field_name] = _int(name, raw, low, high)
            elif name == "group.initial.rebalance.delay.ms":
                kw["group_initial_rebalance_delay_ms"] = _int(name, raw, 0)
            elif name == "zookeeper.connect":
                kw["zookeeper_connect"] = _zookeeper_connect(str(raw))
            elif name == "zookeeper.session.timeout.ms":
                kw["zookeeper_session_timeout_ms"] = _int(name, raw, 1000, 2**31 - 1)
            elif name == "zookeeper.connection.timeout.ms":
                kw["zookeeper_connection_timeout_ms"] = _int(name, raw, 1, 2**31 - 1)
            elif name == "auto.leader.rebalance.enable":
                kw["auto_leader_rebalance_enable"] = _bool(name, raw)
            elif name == "leader.imbalance.check.interval.seconds":
                kw["leader_imbalance_check_interval_seconds"] = _int(name, raw, 1, 2**31 - 1)
            elif name == "leader.imbalance.per.broker.percentage":
                kw["leader_imbalance_per_broker_percentage"] = _int(name, raw, 0, 100)
            elif name == "controlled.shutdown.enable":
                kw["controlled_shutdown_enable"] = _bool(name, raw)
            elif name == "controlled.shutdown.max.retries":
                kw["controlled_shutdown_max_retries"] = _int(name, raw, 0, 2**31 - 1)
            elif name == "controlled.shutdown.retry.backoff.ms":
                kw["controlled_shutdown_retry_backoff_ms"] = _int(name, raw, 0, 2**31 - 1)
            elif name == "offsets.topic.replication.factor":
                kw["offsets_topic_replication_factor"] = _int(name, raw, 1, 32767)
            elif name == "transaction.state.log.replication.factor":
                kw["transaction_state_log_replication_factor"] = _int(name, raw, 1, 32767)
            elif name == "transaction.state.log.min.isr":
                kw["transaction_state_log_min_isr"] = _int(name, raw, 1, 2**31 - 1)
            elif name == "log.max.open.files":
                kw["max_open_files"] = _int(name, raw, 0, 2**31 - 1)
            elif (reason := _ignored_reason(name)) is not None:
                ignored.append(IgnoredSetting(name, str(raw), reason))
            else:
                raise ConfigError(_unknown(name))
        kw["log_defaults"] = LogConfig.from_kafka(log_values)
        return cls(**kw, ignored=tuple(ignored))

    def describe(self) -> dict[str, str]:
        """Broker configs as DescribeConfigs (resource type BROKER) reports them."""
        out = {
            "node.id": str(self.node_id),
            "broker.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": "PLAINTEXT://%s:%d" % self.advertised,
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "max.broker.partitions": str(self.max_broker_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "start.with.offline.partitions": str(self.start_with_offline_partitions).lower(),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "max.connections": str(self.max_connections),
            "queued.max.requests": str(self.queued_max_requests),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "log.flush.scheduler.interval.ms": str(self.flush_scheduler_interval_ms),
            "log.flush.offset.checkpoint.interval.ms": str(self.flush_offset_checkpoint_interval_ms),
            "offsets.topic.num.partitions": str(self.offsets_topic_num_partitions),
            "offsets.retention.minutes": str(self.offsets_retention_ms // 60_000),
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "producer.id.expiration.ms": str(self.producer_id_expiration_ms),
            "producer.id.expiration.check.interval.ms": str(self.producer_id_expiration_check_interval_ms),
            "log.max.open.files": str(self.max_open_files),
            "transaction.partition.verification.enable": str(self.transaction_partition_verification_enable).lower(),
        }
        if self.zookeeper_connect is not None:
            out["zookeeper.connect"] = self.zookeeper_connect
        out["zookeeper.session.timeout.ms"] = str(self.zookeeper_session_timeout_ms)
        out["zookeeper.connection.timeout.ms"] = str(self.zookeeper_connection_timeout_ms
                                                     or self.zookeeper_session_timeout_ms)
        out["auto.leader.rebalance.enable"] = str(self.auto_leader_rebalance_enable).lower()
        out["leader.imbalance.check.interval.seconds"] = str(self.leader_imbalance_check_interval_seconds)
        out["leader.imbalance.per.broker.percentage"] = str(self.leader_imbalance_per_broker_percentage)
        out["controlled.shutdown.enable"] = str(self.controlled_shutdown_enable).lower()
        out["controlled.shutdown.max.retries"] = str(self.controlled_shutdown_max_retries)
        out["controlled.shutdown.retry.backoff.ms"] = str(self.controlled_shutdown_retry_backoff_ms)
        out["offsets.topic.replication.factor"] = str(self.offsets_topic_replication_factor)
        out["transaction.state.log.replication.factor"] = str(self.transaction_state_log_replication_factor)
        out["transaction.state.log.min.isr"] = str(self.transaction_state_log_min_isr)
        for name, (field_name, _low, _high) in (*_TRANSACTION_INTS.items(), *_REPLICA_INTS.items()):
            out[name] = str(getattr(self, field_name))
        topic_values = self.log_defaults.to_kafka()
        for broker_name, topic_name in _LOG_DEFAULTS.items():
            out[broker_name] = topic_values[topic_name]
        return out
