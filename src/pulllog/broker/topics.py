"""Topics and partitions on one broker: which logs exist, their configs, their ids.

On disk, under the data directory::

    meta.properties                 cluster.id and node.id (as Kafka's)
    dynamic-broker-configs.json     {"<node id>": {...}, "": {...}}: broker-level log defaults set
                                    with (Incremental)AlterConfigs, per broker and cluster-wide
    topics/<topic>.json             {"topic_id": uuid, "partitions": n, "configs": {...}}, and
                                    for a cluster member's copy of a replicated topic
                                    "hosted": [indexes]: the partitions it is a replica of
    topics/<topic id>-<n>.pending   a change of partition directories under way (below)
    <topic>-<partition>/            each partition's log (see pulllog.log.log)
    recovery-point-offset-checkpoint, log-start-offset-checkpoint
                                    every log's recovery point and log start offset, written
                                    every log.flush.offset.checkpoint.interval.ms and at a
                                    clean stop (pulllog.log.checkpoint)
    .kafka_cleanshutdown            the clean-shutdown marker: the logs a clean stop closed,
                                    removed at start before anything is written
                                    (pulllog.log.clean_shutdown)

Every file name fits in NAME_MAX (255 bytes) for Kafka's longest topic name (249
characters): ``<topic>-<partition>`` as in Kafka, ``<topic>.json`` (254), and the temp file
every write goes through, ``<topic>.tmp`` (253; a temp file is fsynced and renamed over
its target, so a reader sees the old file or the new one).

Creating a topic, adding partitions and deleting a topic are all or nothing. Each first
writes a *pending* file naming the topic, its id and the partition range it touches; then
the partition directories are created (or removed); the topic file is written (fsynced,
renamed into place) or removed as the commit point; the pending file goes last. A failure
on the way (ENOSPC, EMFILE, a file in the way) is undone at once; a crash is undone by the
next start (:meth:`TopicManager.finish_pending`): the range's directories stay only if the
topic file names that topic id with the range's partitions in it, otherwise they are removed.
So a topic is listed with all its partitions or not at all, and no directory is orphaned.

At start, a topic whose metadata or any partition cannot be opened (an OS error: EIO,
EMFILE, ENOSPC, a file replaced by a directory; or a metadata file that does not parse) is
never skipped silently: skipping it would let auto-creation re-create it with a new topic id
and hide every acknowledged record it holds. :meth:`TopicManager.load` raises
:class:`StorageStartError` naming the path and the cause (Kafka stops a broker whose only log
dir fails), unless the operator asked for a degraded start (``offline_ok``). Then, as Kafka
takes partitions offline one by one, only the partitions that failed are offline
(``Partition.log`` is None; they answer KAFKA_STORAGE_ERROR) and the topic's others are
served. A topic whose metadata file cannot be read, or an internal topic with a partition
that failed (the group coordinator maps groups over all of ``__consumer_offsets``), is kept
whole as an :class:`OfflineTopic`, which CreateTopics and auto-creation treat as existing.
Nothing of an offline partition is written until the next start opens it.

A single broker holds every partition of its topics. A cluster member holds only the
partitions it is a replica of (``Topic.hosted_only``; :meth:`TopicManager.host_partition`):
its copy of a topic has those partitions' directories and no others, and a partition of the
topic it does not hold answers NOT_LEADER_OR_FOLLOWER, as Kafka answers for a partition
another broker hosts. ``Topic.partitions`` maps index to partition either way.

Handlers ask for a partition's log with :meth:`TopicManager.partition_log`, which answers
with the :class:`~pulllog.log.Log` or a :class:`PartitionError` carrying Kafka's error code:
they never index the topic table or a topic's partition list themselves.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from glob import escape as glob_escape
from pathlib import Path

from kio.schema.errors import ErrorCode

from ..log import Log, LogConfig
from ..log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    CheckpointError,
    read_offsets,
    write_offsets,
)
from ..log.clean_shutdown import CLEAN_SHUTDOWN_MARKER, sync_file_system, take_marker, write_marker
from ..log.config import ConfigError
from ..log.log import RecoveryReport, wall_clock_ms
from .config import LOG_DEFAULT_NAMES

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "InvalidTopicError",
    "OfflineTopic",
    "Partition",
    "PartitionError",
    "PolicyViolationError",
    "StorageStartError",
    "Topic",
    "TopicOfflineError",
    "TopicExistsError",
    "TopicManager",
    "UnknownTopicError",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
DEFAULT_MAX_PARTITIONS = 20_000
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's internal topics (Topic.INTERNAL_TOPICS): written only by the broker itself.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "__share_group_state"})
_PENDING = ".pending"


class InvalidTopicError(ValueError):
    """INVALID_TOPIC_EXCEPTION: the name is not a legal Kafka topic name."""


class TopicExistsError(ValueError):
    """TOPIC_ALREADY_EXISTS."""


class PolicyViolationError(ValueError):
    """POLICY_VIOLATION: more partitions than this broker serves (max.broker.partitions), as
    Kafka answers a request for more partitions than its controller takes at once."""


class UnknownTopicError(KeyError):
    """UNKNOWN_TOPIC_OR_PARTITION."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic or partition"


class StorageStartError(Exception):
    """A topic on disk cannot be opened at start; the message is one line for the operator."""


class TopicOfflineError(Exception):
    """KAFKA_STORAGE_ERROR: the topic is on disk but offline (a degraded start), so it cannot
    change until a restart opens it."""


@dataclass(frozen=True, slots=True)
class OfflineTopic:
    """A topic whose files are on disk but could not be opened at start (degraded start).

    It is never served, re-created nor re-described until a restart opens it; each of its
    ``partitions`` answers KAFKA_STORAGE_ERROR, and metadata lists them without a leader."""

    name: str
    topic_id: uuid.UUID | None
    partitions: int
    path: Path
    cause: str

    @property
    def reason(self) -> str:
        return f"{self.path}: {self.cause}"


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


@dataclass(frozen=True, slots=True)
class RecoveryPoints:
    """Every log's recovery point and (where it is past its first segment) log start offset
    at one moment, and how many topics had been deleted then."""

    offsets: dict[tuple[str, int], int]
    log_start_offsets: dict[tuple[str, int], int]
    deletions: int


SYNC_AT_ONCE_FROM = 8
"""A clean stop with this many logs to fsync or more syncs the file system once instead."""


@dataclass
class Partition:
    topic: str
    index: int
    log: Log | None
    """None while the partition is offline (it could not be opened at a degraded start)."""
    offline: str | None = None
    """Why it is offline: the path and the cause."""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    overrides: dict[str, str]
    config: LogConfig
    partitions: dict[int, Partition] = field(default_factory=dict)
    """The partitions held here, by index: all of the topic's, or with ``hosted_only`` those
    this broker is a replica of."""
    internal: bool = False
    hosted_only: bool = False
    """A cluster member's copy of a replicated topic: it holds only the partitions it is a
    replica of, and the others answer NOT_LEADER_OR_FOLLOWER (module docstring)."""

    def logs(self) -> list[Log]:
        """The logs of the partitions that are online."""
        return [p.log for p in self.partitions.values() if p.log is not None]

    @property
    def count(self) -> int:
        """How many partitions the topic file names: all of them on a single broker, up to
        the highest one held on a cluster member."""
        return max(self.partitions, default=-1) + 1


class TopicManager:
    def __init__(
        self,
        data_dir: Path,
        defaults: LogConfig,
        *,
        node_id: int = 0,
        clock: Callable[[], int] = wall_clock_ms,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
    ) -> None:
        self.data_dir = data_dir
        self.static_defaults = defaults
        """The log defaults from server.properties (or code), under any dynamic ones."""
        self.dynamic: dict[str, dict[str, str]] = {}
        """Dynamic broker configs by entity: this broker's id, or "" for the cluster default."""
        self.defaults = defaults
        self.clock = clock
        self.node_id = node_id
        self.max_partitions = max_partitions
        """max.broker.partitions: the most partitions this broker serves (internal topics aside)."""
        self.topics: dict[str, Topic] = {}
        self.offline: dict[str, OfflineTopic] = {}
        """Topics on disk that could not be opened at start (degraded start only)."""
        self.cluster_id = ""
        self._meta_dir = data_dir / "topics"
        self._carried_points: dict[tuple[str, int], int] = {}
        self._carried_starts: dict[tuple[str, int], int] = {}
        self._clean_at_start: dict[tuple[str, int], int] = {}
        """The clean-shutdown marker read at start: the partitions it covered, their log ends."""
        self._checkpoints_read = False  # until then, close() must not overwrite them with nothing
        self.undamaged_recoveries: list[tuple[str, RecoveryReport]] = []
        """Partitions the start recovered and found whole (their lines are in load()'s report too)."""
        # Writers of recovery-point-offset-checkpoint (a worker thread, a topic deletion on the
        # loop) take turns; a write of points read before a deletion is dropped.
        self._checkpoint_lock = threading.Lock()
        self._deletions = 0

    # ------------------------------------------------------------------ startup

    def load(self, *, offline_ok: bool = False) -> list[str]:
        """Open every topic's logs (running recovery where needed); return report lines.

        A topic that cannot be opened raises :class:`StorageStartError` (every log opened so
        far is closed first), or with ``offline_ok`` is kept offline (:attr:`offline`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Before anything is written (log/clean_shutdown.py): from here on a crash is a crash.
        self._clean_at_start, problem = take_marker(self.data_dir)
        report: list[str] = [problem] if problem else []
        self._meta_dir.mkdir(exist_ok=True)
        self.cluster_id = self._load_cluster_id()
        report += self.finish_pending()
        try:
            self._load_dynamic()
        except (OSError, ValueError, ConfigError) as exc:
            report.append(f"{self._dynamic_path.name}: ignored, cannot load dynamic broker configs ({exc})")
        recovery_points = self._read_recovery_points(report)
        start_offsets = self._read_log_start_offsets(report)
        # Kept for topics not open (offline, or not reached when a failed start closes the
        # others): their next start must still find their recovery points.
        self._carried_points = recovery_points
        self._carried_starts = start_offsets or {}
        self._checkpoints_read = True
        for meta in sorted(self._meta_dir.glob("*.json")):
            loaded = self._load_topic(meta, report, recovery_points, start_offsets, offline_ok=offline_ok)
            if isinstance(loaded, Topic):
                self.topics[loaded.name] = loaded
                for partition in loaded.partitions.values():
                    if partition.offline is not None:
                        log.error("partition %s is OFFLINE: it answers KAFKA_STORAGE_ERROR until a restart "
                                  "opens it (%s)", partition.name, partition.offline)
                continue
            if not offline_ok:
                self.close()
                raise StorageStartError(
                    f"cannot open topic {loaded.name}: {loaded.reason}; fix or restore it and restart "
                    "(to serve the other topics meanwhile: start.with.offline.partitions=true)")
            self.offline[loaded.name] = loaded
            log.error("topic %s is OFFLINE: its %d partition(s) answer KAFKA_STORAGE_ERROR until a restart "
                      "opens it (%s)", loaded.name, loaded.partitions, loaded.reason)
        return report

    def _load_topic(self, meta: Path, report: list[str], recovery_points: dict[tuple[str, int], int],
                    start_offsets: dict[tuple[str, int], int] | None, *, offline_ok: bool = False) -> Topic | OfflineTopic:
        """The topic described by ``meta`` with every partition open (with ``offline_ok``,
        those that fail offline, but for an internal topic), or why it cannot be."""
        name = meta.stem
        try:
            info = json.loads(meta.read_text())
            overrides = {str(k): str(v) for k, v in info.get("configs", {}).items()}
            topic_id = uuid.UUID(info["topic_id"])
            count = int(info["partitions"])
            hosted = info.get("hosted")
            indexes = range(count) if hosted is None else sorted({int(i) for i in hosted})
            config = LogConfig.from_kafka(overrides, self.defaults)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ConfigError) as exc:
            return OfflineTopic(name, None, self._partitions_on_disk(name), meta, _cause(exc))
        topic = Topic(name=name, topic_id=topic_id, overrides=overrides, config=config,
                      internal=name.startswith("__"), hosted_only=hosted is not None)
        for index in indexes:
            directory = self.data_dir / f"{name}-{index}"
            end = self._clean_at_start.get((name, index))  # covered by the marker: its log end
            try:
                partition_log = Log.open(
                    directory, config, clock=self.clock, clean=end is not None,
                    recovery_point=recovery_points.get((name, index)) if end is None else end,
                    log_start_offset=None if start_offsets is None else start_offsets.get((name, index), 0),
                    stamped_epochs=topic.hosted_only)
            except Exception as exc:  # any failure stops the start, naming the partition
                if offline_ok and not topic.internal:
                    reason = f"{_failed_path(exc, directory)}: {_cause(exc)}"
                    topic.partitions[index] = Partition(name, index, None, offline=reason)
                    continue
                for opened in topic.partitions.values():  # recovered already: close them cleanly
                    if opened.log is not None:
                        _close_quietly(opened.log)
                return OfflineTopic(name, topic_id, count, _failed_path(exc, directory), _cause(exc))
            topic.partitions[index] = Partition(name, index, partition_log)
            recovery = partition_log.recovery
            if not recovery.clean or recovery.problems:
                report.append(f"{name}-{index}: {recovery.summary()}")
                if not (recovery.problems or recovery.truncated_bytes or recovery.deleted_segments):
                    self.undamaged_recoveries.append((report[-1], recovery))
        return topic

    def _partitions_on_disk(self, name: str) -> int:
        """How many partitions the directories ``<name>-<n>`` describe (for an unreadable
        metadata file: the partitions an offline topic answers for)."""
        indexes = [int(d.name[len(name) + 1:]) for d in self.data_dir.glob(f"{glob_escape(name)}-*")
                   if d.is_dir() and d.name[len(name) + 1:].isdigit()]
        return max(indexes, default=-1) + 1

    def _read_recovery_points(self, report: list[str]) -> dict[tuple[str, int], int]:
        try:
            return read_offsets(self.recovery_checkpoint_path)
        except (OSError, CheckpointError) as exc:
            report.append(f"{exc}: ignored, every log is checked in full after a crash")
            return {}

    def _read_log_start_offsets(self, report: list[str]) -> dict[tuple[str, int], int] | None:
        """The log-start-offset checkpoint; None when there is none to trust (missing: an older
        pulllog's data dir; damaged): then each log reads its own ``log-start-offset`` file."""
        path = self.data_dir / LOG_START_OFFSET_CHECKPOINT_FILE
        if not path.exists():
            return None
        try:
            return read_offsets(path)
        except (OSError, CheckpointError) as exc:
            report.append(f"{exc}: ignored, each log reads its own log-start-offset file")
            return None

    @property
    def recovery_checkpoint_path(self) -> Path:
        return self.data_dir / RECOVERY_POINT_CHECKPOINT_FILE

    def recovery_points(self) -> RecoveryPoints:
        """Every open log's recovery point (all below it is fsynced), for the checkpoint,
        and the loaded checkpoint's entries of topics that are on disk but not open. Read
        them on the loop that owns the logs."""
        carried, carried_starts = self._carried_points, self._carried_starts
        points = {tp: offset for tp, offset in carried.items() if tp[0] not in self.topics}
        starts = {tp: offset for tp, offset in carried_starts.items() if tp[0] not in self.topics}
        for name, topic in list(self.topics.items()):
            for partition in list(topic.partitions.values()):
                tp = (name, partition.index)
                partition_log = partition.log
                if partition_log is None:  # offline: its next start still needs them
                    if tp in carried:
                        points[tp] = carried[tp]
                    if tp in carried_starts:
                        starts[tp] = carried_starts[tp]
                    continue
                points[tp] = partition_log.recovery_point
                # As Kafka: only where it is past the first segment (else the segments say it).
                if partition_log.log_start_offset > partition_log.segments[0].base_offset:
                    starts[tp] = partition_log.log_start_offset
        return RecoveryPoints(points, starts, self._deletions)

    def write_recovery_checkpoint(self, points: RecoveryPoints | None = None) -> None:
        """Write recovery-point-offset-checkpoint and log-start-offset-checkpoint (blocking:
        four fsyncs; off the loop when periodic). Points read before a topic deletion are
        stale and not written."""
        points = self.recovery_points() if points is None else points
        with self._checkpoint_lock:
            if points.deletions == self._deletions:
                write_offsets(self.recovery_checkpoint_path, points.offsets)
                write_offsets(self.data_dir / LOG_START_OFFSET_CHECKPOINT_FILE, points.log_start_offsets)

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
        partition = topic.partitions.get(index)
        if partition is None:
            raise UnknownTopicError(f"topic {name!r} has no partition {index} here")
        return partition

    def partition_logs(self, name: str) -> list[Log] | None:
        """The topic's partition logs in partition order, or None when it does not exist or
        is not whole (never for an internal topic: one is offline whole, see the module doc), or
        is a cluster member's copy (``hosted_only``: see :meth:`hosted_log`)."""
        topic = self.topics.get(name)
        if topic is None or topic.hosted_only:
            return None
        logs = [p.log for p in topic.partitions.values() if p.log is not None]
        return logs if len(logs) == len(topic.partitions) else None

    def hosted_log(self, name: str, index: int) -> Log | None:
        """The log of partition ``index`` of ``name`` if this broker holds it and it is online."""
        topic = self.topics.get(name)
        partition = topic.partitions.get(index) if topic is not None else None
        return partition.log if partition is not None else None

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
            return self._missing_partition(name, index)
        partition = topic.partitions.get(index)
        if partition is not None:
            partition_log = partition.log
            if partition_log is not None:
                return partition_log
            return PartitionError(ErrorCode.kafka_storage_error,
                                  f"partition {name}-{index} is offline: {partition.offline}")
        if topic.hosted_only and index >= 0:  # the cluster's partition, on other brokers
            return PartitionError(ErrorCode.not_leader_or_follower,
                                  f"broker {self.node_id} holds no replica of {name}-{index}")
        return PartitionError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} has no partition {index}")

    def offline_reason(self, name: str) -> str | None:
        """Why topic ``name`` is on disk but offline (a degraded start), or None when it is not."""
        offline = self.offline.get(name)
        return None if offline is None else offline.reason

    def _missing_partition(self, name: str, index: int) -> PartitionError:
        offline = self.offline.get(name)
        if offline is not None and 0 <= index < offline.partitions:
            return PartitionError(ErrorCode.kafka_storage_error,
                                  f"partition {name}-{index} is offline: {offline.reason}")
        return PartitionError(ErrorCode.unknown_topic_or_partition, name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def all_logs(self) -> Iterator[Log]:
        for topic in list(self.topics.values()):
            for partition in list(topic.partitions.values()):
                if partition.log is not None:
                    yield partition.log

    # ------------------------------------------------------------------ changes

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> LogConfig:
        """Everything CreateTopics validates, without creating anything (validate_only)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if name in self.offline:  # its files are on disk: creating it again would hide them
            raise TopicExistsError(f"topic {name!r} already exists (offline: {self.offline[name].reason})")
        if partitions < 1:
            raise ValueError(f"topic {name!r}: the number of partitions must be at least 1, not {partitions}")
        if name not in INTERNAL_TOPICS:
            self._check_room(partitions)
        return LogConfig.from_kafka(dict(configs), self.defaults)

    def partition_count(self) -> int:
        """Partitions this broker serves, internal topics aside (max.broker.partitions counts these)."""
        return sum(len(t.partitions) for name, t in self.topics.items() if name not in INTERNAL_TOPICS)

    def _check_room(self, more: int) -> None:
        have = self.partition_count()
        if have + more > self.max_partitions:
            raise PolicyViolationError(
                f"{more} more partition(s) would make {have + more} on this broker; max.broker.partitions is "
                f"{self.max_partitions} (raise it in server.properties if the open-file limit allows)")

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
               *, topic_id: uuid.UUID | None = None) -> Topic:
        """Create the topic with all its partitions, or nothing (OSError: nothing is left).
        ``topic_id``: the cluster's id for it, else a new one."""
        topic = self._new_topic(name, partitions, configs, topic_id, hosted_only=False)
        self._add(topic, 0, partitions)
        self.topics[name] = topic
        log.info("created topic %s with %d partition(s)", name, partitions)
        return topic

    def host_partition(self, name: str, index: int, configs: Mapping[str, str] | None = None,
                       *, topic_id: uuid.UUID | None = None) -> Log | PartitionError:
        """A cluster member became a replica of partition ``index`` of ``name``: open its log,
        creating the local copy of the topic (``hosted_only``, with the cluster's ``topic_id``
        and ``configs``) or adding the partition to it. Only this partition's directory is
        made. OSError (nothing left) or the partition's error when it is held but offline."""
        topic = self.topics.get(name)
        if topic is None:
            topic = self._new_topic(name, 1, configs, topic_id, hosted_only=True)
            self._add(topic, index, index + 1)
            self.topics[name] = topic
            log.info("created the local copy of topic %s for partition %d", name, index)
        elif index not in topic.partitions:
            # A copy an older pulllog made holds every partition up to the highest it hosted
            # (its file has no "hosted"): it grows as it did, with no gap in its range.
            start = index if topic.hosted_only else topic.count
            if name not in INTERNAL_TOPICS:
                self._check_room(index + 1 - start)
            self._add(topic, start, index + 1)
        return self.partition_log(name, index)

    def _new_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None,
                   topic_id: uuid.UUID | None, *, hosted_only: bool) -> Topic:
        configs = {str(k): str(v) for k, v in (configs or {}).items()}
        config = self.check_new_topic(name, partitions, configs)
        if self._meta_path(name).exists():  # on disk but not served (it failed to load): never re-create it
            raise TopicExistsError(f"topic {name!r} exists on disk ({self._meta_path(name)}) but is not served; "
                                   "see the broker's start-up log")
        return Topic(name, topic_id or uuid.uuid4(), configs, config, internal=name.startswith("__"),
                     hosted_only=hosted_only)

    def _add(self, topic: Topic, start: int, end: int) -> None:
        for partition in self._grow(topic, start, end):
            topic.partitions[partition.index] = partition

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow the topic to ``total`` partitions, all of them or none (see create)."""
        if name in self.offline:  # its topic file could not be read (or it is internal): not rewritten
            raise TopicOfflineError(f"topic {name!r} is offline ({self.offline[name].reason}); "
                                    "add partitions once a restart has opened it")
        topic = self.get(name)
        if topic.hosted_only:  # a cluster member's copy follows the cluster's views instead
            raise ValueError(f"topic {name!r} is the cluster's: add partitions through the cluster")
        current = topic.count
        if total <= current:
            raise ValueError(f"topic {name!r} has {current} partition(s); the new count must be larger, not {total}")
        if name not in INTERNAL_TOPICS:
            self._check_room(total - current)
        if validate_only:
            return
        self._add(topic, current, total)

    def delete(self, name: str) -> Topic:
        """Delete the topic and its partitions' data. The topic file goes first (the commit
        point): if it cannot be removed (OSError) the topic stays whole and served; once it
        is gone, directories a failure leaves behind are removed by the next start."""
        topic = self.get(name)
        try:
            pending: Path | None = self._begin(topic, 0, topic.count)
        except OSError as exc:  # a full disk: deleting must still work, it is how space comes back
            log.warning("deleting topic %s without a pending file (%s): a crash midway may leave its "
                        "partition directories behind", name, exc)
            pending = None
        try:
            _remove_durably(self._meta_path(name))
        except OSError:
            if pending is not None:
                pending.unlink(missing_ok=True)
            raise
        del self.topics[name]
        for partition in topic.partitions.values():
            if partition.log is not None:
                partition.log.delete()  # open read slices keep their FileIO alive
            else:  # offline: removed now if the OS lets us, else by the next start (the pending file)
                shutil.rmtree(self._partition_dir(name, partition.index), ignore_errors=True)
        if pending is not None and not any(self._partition_dir(name, p.index).exists() for p in topic.partitions.values()):
            _unlink_quietly(pending)
        self._deletions += 1
        self._carried_points = {tp: o for tp, o in self._carried_points.items() if tp[0] != name}
        self._carried_starts = {tp: o for tp, o in self._carried_starts.items() if tp[0] != name}
        self._clean_at_start = {tp: o for tp, o in self._clean_at_start.items() if tp[0] != name}
        try:
            # As Kafka's asyncDelete: the topic's recovery points must not outlive it, or a topic
            # created again under the name could have unflushed data trusted after a crash.
            self.write_recovery_checkpoint()
        except OSError as exc:
            log.error("cannot write %s: %s", RECOVERY_POINT_CHECKPOINT_FILE, exc)
        log.info("deleted topic %s", name)
        return topic

    def drop_partition(self, name: str, index: int) -> bool:
        """A cluster member is no longer a replica of partition ``index`` of ``name`` (it was
        reassigned away): delete this broker's copy of it, as Kafka's StopReplica with delete.
        The topic file without the partition is the commit point (a pending file names the
        partition, so a crash before its directory is gone removes it at the next start); the
        copy's last partition takes the whole local topic with it. False when it holds none."""
        topic = self.topics.get(name)
        if topic is None or not topic.hosted_only or index not in topic.partitions:
            return False
        remaining = [i for i in topic.partitions if i != index]
        if not remaining:
            self.delete(name)
            return True
        pending = self._begin(topic, index, index + 1)
        try:
            self._write_meta(topic, remaining)
        except OSError:
            _unlink_quietly(pending)
            raise
        partition = topic.partitions.pop(index)
        if partition.log is not None:
            partition.log.delete()
        else:
            shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)
        if not self._partition_dir(name, index).exists():
            _unlink_quietly(pending)
        key = (name, index)
        for points in (self._carried_points, self._carried_starts, self._clean_at_start):
            points.pop(key, None)
        try:  # the partition's recovery point must not outlive its copy (as in delete)
            self.write_recovery_checkpoint()
        except OSError as exc:
            log.error("cannot write %s: %s", RECOVERY_POINT_CHECKPOINT_FILE, exc)
        log.info("deleted the local copy of %s-%d (this broker is no longer one of its replicas)", name, index)
        return True

    def delete_offline(self, name: str) -> OfflineTopic:
        """Delete a topic that is offline (a degraded start), as Kafka deletes a topic whose log
        dir is offline: the topic file goes now (the commit point: OSError if it cannot, and
        nothing changes), the partition directories now where the OS lets us, else at the
        next start (the pending file stays, :meth:`finish_pending` removes them)."""
        offline = self.offline[name]
        # (A topic file that could not be read gave no id: one derived from the name keeps two
        # such deletions' pending files apart.)
        file_id = offline.topic_id or uuid.uuid5(uuid.NAMESPACE_URL, f"pulllog-topic:{name}")
        pending = self._meta_dir / f"{file_id.hex}-0{_PENDING}"
        try:
            _atomic_write(pending, json.dumps({"topic": name, "topic_id": str(offline.topic_id),
                                               "from": 0, "to": offline.partitions}))
        except OSError as exc:
            log.warning("deleting offline topic %s without a pending file (%s): its partition directories may "
                        "stay behind", name, exc)
        try:
            _remove_durably(self._meta_path(name))
        except OSError:
            _unlink_quietly(pending)
            raise
        del self.offline[name]
        for index in range(offline.partitions):
            shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)
        if any(self._partition_dir(name, i).exists() for i in range(offline.partitions)):
            log.warning("deleted offline topic %s; its partition directories are removed at the next start", name)
        else:
            _unlink_quietly(pending)
            log.info("deleted offline topic %s", name)
        self._deletions += 1
        self._carried_points = {tp: o for tp, o in self._carried_points.items() if tp[0] != name}
        try:
            self.write_recovery_checkpoint()
        except OSError as exc:
            log.error("cannot write %s: %s", RECOVERY_POINT_CHECKPOINT_FILE, exc)
        return offline

    # ------------------------------------------------------------------ all-or-nothing partition changes

    def _meta_path(self, name: str) -> Path:
        return self._meta_dir / f"{name}.json"

    def _partition_dir(self, name: str, index: int) -> Path:
        return self.data_dir / f"{name}-{index}"

    def _begin(self, topic: Topic, start: int, end: int) -> Path:
        """Write the pending file for partitions [start, end) of ``topic`` (see the module doc)."""
        pending = self._meta_dir / f"{topic.topic_id.hex}-{start}{_PENDING}"
        _atomic_write(pending, json.dumps({"topic": topic.name, "topic_id": str(topic.topic_id),
                                           "from": start, "to": end}))
        return pending

    def _grow(self, topic: Topic, start: int, end: int) -> list[Partition]:
        """Open new partitions [start, end) and commit the topic file that lists them, or undo."""
        in_the_way = [d for d in (self._partition_dir(topic.name, i) for i in range(start, end)) if d.exists()]
        if in_the_way:  # a directory no topic file claims: never adopt (or later remove) its data
            raise FileExistsError(errno.EEXIST, f"{in_the_way[0]} is in the way of topic {topic.name!r} "
                                  f"({len(in_the_way)} such); move it away if it holds nothing to keep")
        pending = self._begin(topic, start, end)
        opened: list[Partition] = []
        try:
            for index in range(start, end):
                directory = self._partition_dir(topic.name, index)
                opened.append(Partition(topic.name, index,
                                        Log.open(directory, topic.config, clock=self.clock, clean=False)))
            self._write_meta(topic, {*topic.partitions, *range(start, end)})
        except BaseException as exc:
            log.error("creating partitions %d-%d of %s failed, undoing: %s", start, end - 1, topic.name, exc)
            for partition in opened:
                if partition.log is not None:  # (all of them: just opened)
                    partition.log.delete()
            for index in range(start, end):  # also a directory a failed Log.open left half made
                shutil.rmtree(self._partition_dir(topic.name, index), ignore_errors=True)
            if not any(self._partition_dir(topic.name, i).exists() for i in range(start, end)):
                _unlink_quietly(pending)  # else the next start finishes the undo
            raise
        _unlink_quietly(pending)  # committed: a pending file left here is dropped by the next start
        return opened

    def finish_pending(self) -> list[str]:
        """Finish what a crash interrupted (see the module doc): keep a pending range whose
        topic file names it, remove its directories otherwise; drop temp files. Report lines."""
        report: list[str] = []
        for tmp in self._meta_dir.glob("*.tmp"):
            try:
                tmp.unlink(missing_ok=True)
            except OSError as exc:  # a directory, say: harmless where it is
                report.append(f"{tmp.name}: left alone, cannot remove this leftover temp file ({exc.strerror})")
        for pending in sorted(self._meta_dir.glob(f"*{_PENDING}")):
            try:
                info = json.loads(pending.read_text())
                name, topic_id, start, end = str(info["topic"]), str(info["topic_id"]), int(info["from"]), int(info["to"])
                validate_topic_name(name)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                report.append(f"{pending.name}: left alone, unreadable ({exc})")
                continue
            if self._claims(name, topic_id, start, end):
                pending.unlink()
                continue
            for index in range(start, end):
                shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)
            if any(self._partition_dir(name, i).exists() for i in range(start, end)):
                report.append(f"{pending.name}: cannot remove the directories of {name}-{start}..{end - 1}")
                continue
            pending.unlink()
            report.append(f"{name}: removed partition directories {start}..{end - 1} left by an interrupted "
                          "create or delete")
        return report

    def _claims(self, name: str, topic_id: str, start: int, end: int) -> bool:
        """True if topic ``name``'s file names ``topic_id`` with partitions [start, end) in it."""
        try:
            info = json.loads(self._meta_path(name).read_text())
        except FileNotFoundError:
            return False
        except (OSError, ValueError):  # there, but unreadable (an offline topic): never remove its data
            return True
        try:
            if str(info.get("topic_id")) != topic_id:
                return False
            hosted = info.get("hosted")
            if hosted is None:
                return int(info.get("partitions", 0)) >= end
            return set(range(start, end)) <= {int(i) for i in hosted}
        except (AttributeError, TypeError, ValueError):
            return True

    def alter_config(self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False) -> LogConfig:
        """Replace the topic's overrides; the new config takes effect at once."""
        topic = self.get(name)
        new_overrides = {str(k): str(v) for k, v in overrides.items()}
        config = LogConfig.from_kafka(new_overrides, self.defaults)
        if name == OFFSETS_TOPIC and config.cleanup_policy != "compact":
            # Retention would delete committed offsets: the group coordinator relies on compaction.
            raise ConfigError(f"cleanup.policy={config.cleanup_policy}: {OFFSETS_TOPIC} keeps cleanup.policy=compact "
                              "(it holds the committed offsets)")
        if validate_only:
            return config
        self._write_meta(topic, topic.partitions, new_overrides)  # first: a failure changes nothing
        topic.overrides = new_overrides
        topic.config = config
        for partition_log in topic.logs():
            partition_log.update_config(config)
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
            for partition_log in topic.logs():
                partition_log.update_config(config)

    def _write_meta(self, topic: Topic, indexes: Iterable[int], overrides: Mapping[str, str] | None = None) -> None:
        """The topic file naming partitions ``indexes`` (all of 0..n-1 unless ``hosted_only``)."""
        held = sorted(set(indexes))
        info: dict[str, object] = {"topic_id": str(topic.topic_id), "partitions": max(held, default=-1) + 1,
                                   "configs": dict(topic.overrides if overrides is None else overrides)}
        if topic.hosted_only:
            info["hosted"] = held
        _atomic_write(self._meta_path(topic.name), json.dumps(info, indent=1, sort_keys=True))

    def close(self) -> None:
        """Close every log, write both checkpoints, then the clean-shutdown marker naming the
        logs that closed cleanly (log/clean_shutdown.py). Logs with nothing unflushed fsync
        nothing; many with something do one sync of the file system between them."""
        logs = list(self.all_logs())
        self._sync_at_once(logs)
        for partition_log in logs:
            try:
                partition_log.close()
            except OSError as exc:  # keep closing the others; this one is recovered at the next start
                log.error("closing %s failed: %s", partition_log.directory.name, exc)
        if not self._checkpoints_read:
            return  # the start stopped before it read them: they are as it found them
        try:
            self.write_recovery_checkpoint()
        except OSError as exc:  # costs only a longer check at the next start, which recovers every log
            log.error("cannot write %s: %s; no clean-shutdown marker", RECOVERY_POINT_CHECKPOINT_FILE, exc)
            return
        covered = {tp: end for tp, end in self._clean_at_start.items() if tp[0] not in self.topics}
        for name, topic in list(self.topics.items()):
            for partition in topic.partitions.values():
                tp = (name, partition.index)
                if partition.log is None:  # offline, untouched: as the marker found it
                    if tp in self._clean_at_start:
                        covered[tp] = self._clean_at_start[tp]
                elif partition.log.closed:  # its close flushed it: the recovery point is its end
                    covered[tp] = partition.log.recovery_point
        try:
            write_marker(self.data_dir, covered)
        except OSError as exc:
            log.error("cannot write %s: %s; the next start recovers every log", CLEAN_SHUTDOWN_MARKER, exc)

    def _sync_at_once(self, logs: list[Log]) -> None:
        """When many logs have something to fsync: write it all, then one syncfs instead of
        fsyncs per file (a failure leaves each log to fsync its own files in close())."""
        dirty = [partition_log for partition_log in logs if not partition_log.closed and partition_log.needs_sync]
        if len(dirty) < SYNC_AT_ONCE_FROM:
            return
        for partition_log in dirty:
            partition_log.prepare_close()
        try:
            if not sync_file_system(self.data_dir):
                return
        except OSError as exc:
            log.error("%s; each log fsyncs its own files instead", exc)
            return
        for partition_log in dirty:
            partition_log.mark_synced()


def _cause(exc: BaseException) -> str:
    """An OS error as its message (the path is reported separately), anything else as is."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, (OSError, ValueError, KeyError, TypeError, ConfigError)):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"  # not an expected failure: say what it was


def _failed_path(exc: BaseException, directory: Path) -> Path:
    """The file the OS refused, when it says, else the partition's directory."""
    filename = getattr(exc, "filename", None)
    return Path(filename) if filename else directory


def _close_quietly(partition_log: Log) -> None:
    try:
        partition_log.close()
    except OSError as exc:  # the next start recovers it
        log.error("closing %s failed: %s", partition_log.directory.name, exc)


def _atomic_write(path: Path, text: str) -> None:
    """Write ``path`` through ``<stem>.tmp`` (not ``<name>.tmp``: for a 249-character topic
    that would pass NAME_MAX), fsynced, renamed over it, and the rename made durable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # a directory in the way, say: the next start's finish_pending tries again
        raise
    _fsync_dir(path.parent)


def _remove_durably(path: Path) -> None:
    path.unlink()
    _fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.error("cannot remove %s (%s); the next start does", path, exc.strerror)


def _fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable. Best effort: the change is made
    already, and failing the caller now would undo work the file system has accepted."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.error("cannot fsync directory %s (%s); the change is made, not yet durable", directory, exc.strerror)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
