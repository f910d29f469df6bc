"""Topics and partitions on one broker: which logs exist, their configs, their ids.

On disk, under the data directory::

    meta.properties                 cluster.id and node.id (as Kafka's)
    dynamic-broker-configs.json     {"<node id>": {...}, "": {...}}: broker-level log defaults set
                                    with (Incremental)AlterConfigs, per broker and cluster-wide
    topics/<topic>.json             {"topic_id": uuid, "partitions": n, "configs": {...}}
    <topic>-<partition>/            each partition's log (see pulllog.log.log)

The topic file is written (atomically: temp file + rename) before the partition
directories it describes, so a crash leaves either no topic or a topic whose missing
partition directories are created on the next start.

Handlers ask for a partition's log with :meth:`TopicManager.partition_log`, which answers
with the :class:`~pulllog.log.Log` or a :class:`PartitionError` carrying Kafka's error code:
they never index the topic table or a topic's partition list themselves.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from ..log import Log, LogConfig
from ..log.config import ConfigError
from ..log.log import wall_clock_ms
from .config import LOG_DEFAULT_NAMES

__all__ = [
    "InvalidTopicError",
    "Partition",
    "PartitionError",
    "Topic",
    "TopicExistsError",
    "TopicManager",
    "UnknownTopicError",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


class InvalidTopicError(ValueError):
    """INVALID_TOPIC_EXCEPTION: the name is not a legal Kafka topic name."""


class TopicExistsError(ValueError):
    """TOPIC_ALREADY_EXISTS."""


class UnknownTopicError(KeyError):
    """UNKNOWN_TOPIC_OR_PARTITION."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic or partition"


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME}")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
        )


@dataclass(frozen=True, slots=True)
class PartitionError:
    """Why a partition has no log here: Kafka's error code and a one-line message."""

    code: ErrorCode
    message: str


@dataclass
class Partition:
    topic: str
    index: int
    log: Log

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    overrides: dict[str, str]
    config: LogConfig
    partitions: list[Partition] = field(default_factory=list)
    internal: bool = False


class TopicManager:
    def __init__(
        self,
        data_dir: Path,
        defaults: LogConfig,
        *,
        node_id: int = 0,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.data_dir = data_dir
        self.static_defaults = defaults
        """The log defaults from server.properties (or code), under any dynamic ones."""
        self.dynamic: dict[str, dict[str, str]] = {}
        """Dynamic broker configs by entity: this broker's id, or "" for the cluster default."""
        self.defaults = defaults
        self.clock = clock
        self.node_id = node_id
        self.topics: dict[str, Topic] = {}
        self.cluster_id = ""
        self._meta_dir = data_dir / "topics"

    # ------------------------------------------------------------------ startup

    def load(self) -> list[str]:
        """Open every topic's logs (running recovery where needed); return report lines."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._meta_dir.mkdir(exist_ok=True)
        self.cluster_id = self._load_cluster_id()
        report: list[str] = []
        try:
            self._load_dynamic()
        except (OSError, ValueError, ConfigError) as exc:
            report.append(f"{self._dynamic_path.name}: ignored, cannot load dynamic broker configs ({exc})")
        for meta in sorted(self._meta_dir.glob("*.json")):
            try:
                info = json.loads(meta.read_text())
                name = meta.stem
                overrides = {str(k): str(v) for k, v in info.get("configs", {}).items()}
                topic = Topic(
                    name=name,
                    topic_id=uuid.UUID(info["topic_id"]),
                    overrides=overrides,
                    config=LogConfig.from_kafka(overrides, self.defaults),
                    internal=name.startswith("__"),
                )
                for index in range(int(info["partitions"])):
                    partition_log = Log.open(self.data_dir / f"{name}-{index}", topic.config, clock=self.clock)
                    topic.partitions.append(Partition(name, index, partition_log))
                    if not partition_log.recovery.clean or partition_log.recovery.problems:
                        report.append(f"{name}-{index}: {partition_log.recovery.summary()}")
                self.topics[name] = topic
            except (OSError, ValueError, KeyError, ConfigError) as exc:
                report.append(f"{meta.name}: skipped, cannot load topic metadata ({exc})")
        return report

    def _load_cluster_id(self) -> str:
        path = self.data_dir / "meta.properties"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        cluster_id = uuid.uuid4().hex[:22]
        _atomic_write(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
        return cluster_id

    # ------------------------------------------------------------------ queries

    def get(self, name: str) -> Topic:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None

    def partition(self, name: str, index: int) -> Partition:
        topic = self.get(name)
        if not 0 <= index < len(topic.partitions):
            raise UnknownTopicError(f"topic {name!r} has no partition {index}")
        return topic.partitions[index]

    def partition_logs(self, name: str) -> list[Log] | None:
        """The topic's partition logs in partition order, or None when it does not exist."""
        topic = self.topics.get(name)
        return None if topic is None else [p.log for p in topic.partitions]

    def find(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def names(self) -> list[str]:
        return list(self.topics)

    def partition_log(self, name: str, index: int) -> Log | PartitionError:
        """The log of partition ``index`` of topic ``name``, or UNKNOWN_TOPIC_OR_PARTITION.

        The one lookup every handler uses, Produce's and Fetch's per partition: an error is
        a value (no exception), and the found path allocates nothing."""
        topic = self.topics.get(name)
        if topic is None:
            return PartitionError(ErrorCode.unknown_topic_or_partition, name)
        partitions = topic.partitions
        if 0 <= index < len(partitions):
            return partitions[index].log
        return PartitionError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} has no partition {index}")

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def all_logs(self) -> Iterator[Log]:
        for topic in list(self.topics.values()):
            for partition in topic.partitions:
                yield partition.log

    # ------------------------------------------------------------------ changes

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> LogConfig:
        """Everything CreateTopics validates, without creating anything (validate_only)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise ValueError(f"topic {name!r}: the number of partitions must be at least 1, not {partitions}")
        return LogConfig.from_kafka(dict(configs), self.defaults)

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> Topic:
        configs = {str(k): str(v) for k, v in (configs or {}).items()}
        config = self.check_new_topic(name, partitions, configs)
        topic = Topic(name, uuid.uuid4(), configs, config, internal=name.startswith("__"))
        self._write_meta(topic, partitions)
        for index in range(partitions):
            topic.partitions.append(
                Partition(name, index, Log.open(self.data_dir / f"{name}-{index}", config, clock=self.clock))
            )
        self.topics[name] = topic
        log.info("created topic %s with %d partition(s)", name, partitions)
        return topic

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self.get(name)
        current = len(topic.partitions)
        if total <= current:
            raise ValueError(f"topic {name!r} has {current} partition(s); the new count must be larger, not {total}")
        if validate_only:
            return
        self._write_meta(topic, total)
        for index in range(current, total):
            topic.partitions.append(
                Partition(name, index, Log.open(self.data_dir / f"{name}-{index}", topic.config, clock=self.clock))
            )

    def delete(self, name: str) -> Topic:
        topic = self.get(name)
        del self.topics[name]
        (self._meta_dir / f"{name}.json").unlink(missing_ok=True)
        for partition in topic.partitions:
            partition.log.delete()  # open read slices keep their FileIO alive
        log.info("deleted topic %s", name)
        return topic

    def alter_config(self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False) -> LogConfig:
        """Replace the topic's overrides; the new config takes effect at once."""
        topic = self.get(name)
        new_overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_kafka(new_overrides, self.defaults)
        if validate_only:
            return config
        topic.overrides = new_overrides
        topic.config = config
        self._write_meta(topic, len(topic.partitions))
        for partition in topic.partitions:
            partition.log.update_config(config)
        return config

    # ------------------------------------------------------------------ dynamic broker configs

    @property
    def _dynamic_path(self) -> Path:
        return self.data_dir / "dynamic-broker-configs.json"

    def _load_dynamic(self) -> None:
        if not self._dynamic_path.exists():
            return
        raw = json.loads(self._dynamic_path.read_text())
        dynamic = {str(entity): {str(k): str(v) for k, v in values.items()} for entity, values in raw.items()}
        self.defaults = self._defaults_with(dynamic)
        self.dynamic = dynamic

    def _defaults_with(self, dynamic: Mapping[str, Mapping[str, str]]) -> LogConfig:
        """The log defaults: static, then the cluster-wide dynamic ones, then this broker's."""
        values: dict[str, str] = {}
        for entity in ("", str(self.node_id)):
            for name, value in dynamic.get(entity, {}).items():
                values[LOG_DEFAULT_NAMES[name]] = value
        return LogConfig.from_kafka(values, self.static_defaults)

    def alter_broker_config(self, entity: str, values: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace the dynamic broker configs of ``entity`` (this broker's id, or "" for the
        cluster default); every topic's config follows at once where it has no override of
        its own. Names are broker-level log defaults (LOG_DEFAULT_NAMES)."""
        unknown = sorted(set(values) - set(LOG_DEFAULT_NAMES))
        if unknown:
            raise ConfigError(f"{', '.join(unknown)}: not a dynamic broker config in pulllog; "
                              f"dynamic: {', '.join(sorted(LOG_DEFAULT_NAMES))}")
        dynamic = {**self.dynamic, entity: {str(k): str(v) for k, v in values.items()}}
        defaults = self._defaults_with(dynamic)
        configs = {name: LogConfig.from_kafka(topic.overrides, defaults) for name, topic in self.topics.items()}
        if validate_only:
            return
        _atomic_write(self._dynamic_path, json.dumps({k: v for k, v in dynamic.items() if v}, indent=1, sort_keys=True))
        self.dynamic = {k: v for k, v in dynamic.items() if v}
        self.defaults = defaults
        for name, config in configs.items():
            topic = self.topics[name]
            topic.config = config
            for partition in topic.partitions:
                partition.log.update_config(config)

    def _write_meta(self, topic: Topic, partitions: int) -> None:
        info = {"topic_id": str(topic.topic_id), "partitions": partitions, "configs": topic.overrides}
        _atomic_write(self._meta_dir / f"{topic.name}.json", json.dumps(info, indent=1, sort_keys=True))

    def close(self) -> None:
        for partition_log in self.all_logs():
            try:
                partition_log.close()
            except OSError as exc:  # keep closing the others: each gets its clean marker
                log.error("closing %s failed: %s", partition_log.directory.name, exc)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
