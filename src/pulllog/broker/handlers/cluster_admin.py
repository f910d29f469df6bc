"""Topic admin and Metadata of a cluster member (``zookeeper.connect``), through ZooKeeper.

Imported by the handlers only when the broker is a cluster member, so a single broker never
loads it (nor pulllog.cluster). As Kafka's ZooKeeper-mode brokers:

- CreateTopics writes the topic's config and assignment (replicas from the request's explicit
  assignment, or Kafka's rack-unaware assignment over the live brokers with the request's
  replication factor or ``default.replication.factor``); the controller then elects each
  partition's first leader. The answer waits until every new partition has a leader in this
  broker's view, up to the request's timeout (then REQUEST_TIMED_OUT: the topic exists, its
  leaders are late); a timeout of 0 answers at once. More replicas than live brokers:
  INVALID_REPLICATION_FACTOR, with Kafka's message.
- CreatePartitions extends the assignment (conditional on its znode version), continuing the
  topic's layout, and waits for the new partitions' leaders the same way.
- DeleteTopics writes ``/admin/delete_topics/<topic>``; the controller removes the topic's
  znodes and every broker drops its logs when the topic leaves its view. The answer waits
  until the topic is gone from this broker's view (else REQUEST_TIMED_OUT).
- Metadata answers from the partition views every broker keeps (all topics of the cluster):
  leader, leader epoch, replicas, ISR, offline replicas (not live); a partition without a live
  leader answers LEADER_NOT_AVAILABLE with leader -1. Auto-creation writes the topic as
  CreateTopics does and answers LEADER_NOT_AVAILABLE for it until its leaders are elected.
- FindCoordinator answers the leader of the key's partition of ``__consumer_offsets`` /
  ``__transaction_state`` (Kafka's hash rule, net/coordinator_keys.py), creating the topic
  through ZooKeeper on first use with ``offsets.topic.replication.factor`` /
  ``transaction.state.log.replication.factor`` replicas; COORDINATOR_NOT_AVAILABLE until
  it has a live leader.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...cluster.controller import InvalidReplicationFactorError, assign_replicas, preferred_start_index
from ...cluster.errors import TopicAlreadyExistsError
from ...cluster.state import NO_LEADER, PartitionView
from ...cluster.znodes import TopicAssignment
from ...log import ConfigError
from ..topics import INTERNAL_TOPICS, OFFSETS_TOPIC, InvalidTopicError, validate_topic_name

if TYPE_CHECKING:
    from ...cluster.membership import ClusterMembership
    from ..api import BrokerApi

__all__ = [
    "create_partitions", "create_topics", "delete_topics", "find_coordinator", "internal_topic_settings",
    "metadata_topics", "topic_views",
]


def _membership(broker: "BrokerApi") -> "ClusterMembership":
    membership = broker.membership
    assert membership is not None, "cluster_admin serves cluster members only"
    return membership


def topic_views(broker: "BrokerApi") -> dict[str, list[PartitionView]]:
    """The cluster's topics as this broker sees them, each with its partitions in order."""
    out: dict[str, list[PartitionView]] = {}
    for (topic, _partition), view in broker.partition_views.items():
        out.setdefault(topic, []).append(view)
    for views in out.values():
        views.sort(key=lambda v: v.partition)
    return out


def _live(broker: "BrokerApi") -> set[int]:
    view = broker.cluster_view
    return {b.broker_id for b in view.brokers} if view is not None else set()


def _has_leaders(broker: "BrokerApi", topic: str, partitions: Iterable[int]) -> bool:
    views = broker.partition_views
    return all((v := views.get((topic, p))) is not None and v.leader != NO_LEADER for p in partitions)


# ---------------------------------------------------------------------- Metadata

def partition_entry(view: PartitionView, live: set[int]) -> dict[str, Any]:
    leader = view.leader if view.leader in live else NO_LEADER
    return {
        "error_code": ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available,
        "partition_index": view.partition,
        "leader_id": leader,
        "leader_epoch": view.leader_epoch,
        "replica_nodes": list(view.replicas),
        "isr_nodes": list(view.state.isr) if view.state is not None else [],
        "offline_replicas": [r for r in view.replicas if r not in live],
    }


def topic_entry(name: str, views: Sequence[PartitionView], live: set[int], operations: int) -> dict[str, Any]:
    return {
        "topic_authorized_operations": operations,
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": views[0].topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [partition_entry(v, live) for v in views],
    }


async def metadata_topics(broker: "BrokerApi", requested: list[str] | None, allow_create: bool,
                          operations: int) -> list[dict[str, Any]]:
    """Metadata's topics array of a cluster member (``requested`` None: every topic)."""
    views = topic_views(broker)
    live = _live(broker)
    names = sorted(views) if requested is None else requested
    out = []
    for name in names:
        if name in views:
            out.append(topic_entry(name, views[name], live, operations))
            continue
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            out.append({"error_code": ErrorCode.invalid_topic_exception, "name": name, "partitions": []})
            continue
        if not allow_create or name in INTERNAL_TOPICS:
            out.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "partitions": [],
                        "topic_id": None})
            continue
        code, _message = await _create_one(broker, name, broker.config.num_partitions,
                                           broker.config.default_replication_factor, None, {})
        # Created (or created meanwhile by another): its leaders come in a moment (Kafka's answer).
        if code in (ErrorCode.none, ErrorCode.topic_already_exists):
            code = ErrorCode.leader_not_available
        out.append({"error_code": code, "name": name, "partitions": [], "topic_id": None})
    return out


# ---------------------------------------------------------------------- CreateTopics

def _check_assignment(indexes: Sequence[int], replicas: Sequence[Sequence[int]], live: set[int], *,
                      first_partition: int) -> str | None:
    """Why an explicit assignment is refused (INVALID_REPLICA_ASSIGNMENT), as Kafka checks it."""
    if sorted(indexes) != list(range(first_partition, first_partition + len(indexes))):
        return f"the assigned partitions must be numbered consecutively from {first_partition}"
    sizes = {len(r) for r in replicas}
    if 0 in sizes or len(sizes) > 1:
        return "every partition needs the same number of replicas, at least one"
    for index, brokers in zip(indexes, replicas):
        if len(set(brokers)) != len(brokers):
            return f"partition {index} names a broker twice: {list(brokers)}"
        unknown = sorted(set(brokers) - live)
        if unknown:
            return f"unknown broker(s) in the replica assignment of partition {index}: {unknown}"
    return None


async def _create_one(broker: "BrokerApi", name: str, partitions: int, replication: int,
                      assignment: Mapping[int, tuple[int, ...]] | None, configs: Mapping[str, str],
                      validate_only: bool = False,
                      topic_id: uuid.UUID | None = None) -> tuple[ErrorCode, str | None]:
    live = _live(broker)
    if assignment is None:
        try:
            assignment = assign_replicas(live, partitions, replication)
        except InvalidReplicationFactorError as exc:
            return ErrorCode.invalid_replication_factor, str(exc)
    if validate_only:
        return ErrorCode.none, None
    try:
        await asyncio.to_thread(_membership(broker).create_topic,
                                TopicAssignment(name, topic_id or uuid.uuid4(), dict(assignment)), dict(configs))
    except TopicAlreadyExistsError as exc:
        return ErrorCode.topic_already_exists, str(exc)
    return ErrorCode.none, None


def _error(name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"name": name, "topic_id": None, "error_code": code, "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": []}


async def create_topics(broker: "BrokerApi", topics: Sequence[Any], validate_only: bool,
                        timeout_s: float) -> list[dict[str, Any]]:
    from .configs import topic_config_entries

    results: list[dict[str, Any]] = []
    waiting: list[tuple[int, str, int]] = []  # (result index, topic, partitions) to wait for
    seen: set[str] = set()
    known = set(topic_views(broker))
    for t in topics:
        name = t.name
        if name in seen:
            results.append(_error(name, ErrorCode.invalid_request, f"topic {name!r} appears twice in the request"))
            continue
        seen.add(name)
        partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        replication = broker.config.default_replication_factor if t.replication_factor == -1 else t.replication_factor
        explicit: dict[int, tuple[int, ...]] | None = None
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                results.append(_error(name, ErrorCode.invalid_request, "give either a replica assignment or a "
                                      "partition count and replication factor, not both"))
                continue
            explicit = {a.partition_index: tuple(a.broker_ids) for a in t.assignments}
            problem = _check_assignment(list(explicit), list(explicit.values()), _live(broker), first_partition=0)
            if problem:
                results.append(_error(name, ErrorCode.invalid_replica_assignment, problem))
                continue
            partitions, replication = len(explicit), len(next(iter(explicit.values())))
        configs = {c.name: c.value for c in t.configs}
        if any(v is None for v in configs.values()):
            results.append(_error(name, ErrorCode.invalid_config, "config values may not be null"))
            continue
        if name in INTERNAL_TOPICS:
            results.append(_error(name, ErrorCode.invalid_request,
                                  f"{name} is an internal topic: the broker creates it when it first needs it"))
            continue
        if name in known:
            results.append(_error(name, ErrorCode.topic_already_exists, f"topic {name!r} already exists"))
            continue
        if partitions < 1:
            results.append(_error(name, ErrorCode.invalid_partitions,
                                  f"number of partitions must be at least 1, not {partitions}"))
            continue
        try:
            validate_topic_name(name)
            from ...log import LogConfig

            config = LogConfig.from_kafka(dict(configs), broker.topics.defaults)
        except InvalidTopicError as exc:
            results.append(_error(name, ErrorCode.invalid_topic_exception, str(exc)))
            continue
        except ConfigError as exc:
            results.append(_error(name, ErrorCode.invalid_config, str(exc)))
            continue
        topic_id = uuid.uuid4()
        code, message = await _create_one(broker, name, partitions, replication, explicit, configs, validate_only,
                                          topic_id)
        if code != ErrorCode.none:
            results.append(_error(name, code, message))
            continue
        entries = topic_config_entries(broker, config, set(configs))
        results.append({
            "name": name, "topic_id": None if validate_only else topic_id, "error_code": ErrorCode.none,
            "error_message": None, "num_partitions": partitions, "replication_factor": replication,
            "configs": [{"name": e["name"], "value": e["value"], "read_only": False,
                         "config_source": e["config_source"], "is_sensitive": False} for e in entries],
        })
        if not validate_only:
            waiting.append((len(results) - 1, name, partitions))
    await _wait_for_leaders(broker, results, waiting, timeout_s)
    return results


async def _wait_for_leaders(broker: "BrokerApi", results: list[dict[str, Any]],
                            waiting: Sequence[tuple[int, str, int]], timeout_s: float,
                            first_partition: Mapping[str, int] | None = None) -> None:
    """Kafka's CreateTopics/CreatePartitions purgatory: wait until each new partition has a
    leader; what is still without one at the timeout answers REQUEST_TIMED_OUT."""
    if not waiting or timeout_s <= 0:
        return
    first = first_partition or {}

    def ready() -> bool:
        return all(_has_leaders(broker, name, range(first.get(name, 0), count)) for _i, name, count in waiting)

    if await broker.wait_for_views(ready, timeout_s):
        return
    for index, name, count in waiting:
        if not _has_leaders(broker, name, range(first.get(name, 0), count)):
            results[index]["error_code"] = ErrorCode.request_timed_out
            results[index]["error_message"] = (f"topic {name!r} was created but not every partition has a leader "
                                               f"after {timeout_s:g} s; it will have once enough brokers are up")


# ---------------------------------------------------------------------- CreatePartitions

async def create_partitions(broker: "BrokerApi", topics: Sequence[Any], validate_only: bool,
                            timeout_s: float) -> list[dict[str, Any]]:
    membership = _membership(broker)
    results: list[dict[str, Any]] = []
    waiting: list[tuple[int, str, int]] = []
    first: dict[str, int] = {}
    for t in topics:
        name = t.name
        if name in INTERNAL_TOPICS:
            results.append({"name": name, "error_code": ErrorCode.invalid_request,
                            "error_message": f"{name} is an internal topic: its partition count cannot change"})
            continue
        for _attempt in range(3):  # the assignment moved under us (another CreatePartitions): again
            outcome = await _grow_topic(broker, membership, name, t, validate_only)
            if outcome is not None:
                break
        else:
            outcome = {"error_code": ErrorCode.invalid_request,
                       "error_message": f"topic {name!r} kept changing while adding partitions; try again"}
        if isinstance(outcome, int):
            waiting.append((len(results), name, t.count))
            first[name] = outcome
            outcome = {"error_code": ErrorCode.none, "error_message": None}
        results.append({"name": name, **outcome})
    await _wait_for_leaders(broker, results, waiting, timeout_s, first)
    return results


async def _grow_topic(broker: "BrokerApi", membership: "ClusterMembership", name: str, t: Any,
                      validate_only: bool) -> dict[str, Any] | int | None:
    """One try: an error (or validate_only's success) answer, the first new partition once
    written, or None when the assignment changed between the read and the write."""
    read = await asyncio.to_thread(membership.read_assignment, name)
    if read is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition, "error_message": f"topic {name!r} does not exist"}
    current, version = read
    existing = len(current.partitions)
    if t.count <= existing:
        return {"error_code": ErrorCode.invalid_partitions,
                "error_message": f"Topic currently has {existing} partitions, which is higher than the requested "
                                 f"{t.count}."}
    live = _live(broker)
    if t.assignments is not None:
        new = {existing + i: tuple(a.broker_ids) for i, a in enumerate(t.assignments)}
        problem = (f"{len(t.assignments)} assignments for {t.count - existing} new partitions"
                   if len(t.assignments) != t.count - existing else
                   _check_assignment(list(new), list(new.values()), live, first_partition=existing))
        if problem:
            return {"error_code": ErrorCode.invalid_replica_assignment, "error_message": problem}
    else:
        replication = len(current.partitions.get(0, ())) or 1
        try:
            new = assign_replicas(live, t.count - existing, replication, first_partition=existing,
                                  start_index=preferred_start_index(live, current.partitions.get(0, ())))
        except InvalidReplicationFactorError as exc:
            return {"error_code": ErrorCode.invalid_replication_factor, "error_message": str(exc)}
    if validate_only:
        return {"error_code": ErrorCode.none, "error_message": None}
    grown = TopicAssignment(name, current.topic_id, {**current.partitions, **new}, current.adding, current.removing)
    if not await asyncio.to_thread(membership.write_assignment, grown, version):
        return None
    return existing


# ---------------------------------------------------------------------- DeleteTopics

async def delete_topics(broker: "BrokerApi", requested: Sequence[tuple[str | None, uuid.UUID | None]],
                        by_id_version: bool, timeout_s: float) -> list[dict[str, Any]]:
    membership = _membership(broker)
    views = topic_views(broker)
    by_id = {v[0].topic_id: name for name, v in views.items()}
    responses: list[dict[str, Any]] = []
    pending: list[tuple[int, str]] = []
    for name, topic_id in requested:
        found = name if name else by_id.get(topic_id) if topic_id is not None else None
        if not found or found not in views:
            code = ErrorCode.unknown_topic_id if (not name and by_id_version) else ErrorCode.unknown_topic_or_partition
            responses.append({"name": name, "topic_id": topic_id, "error_code": code,
                              "error_message": f"topic {name or topic_id} does not exist"})
            continue
        the_id = views[found][0].topic_id
        if found in INTERNAL_TOPICS:
            responses.append({"name": found, "topic_id": the_id, "error_code": ErrorCode.invalid_request,
                              "error_message": f"{found} is an internal topic: it cannot be deleted"})
            continue
        await asyncio.to_thread(membership.request_topic_deletion, found)
        pending.append((len(responses), found))
        responses.append({"name": found, "topic_id": the_id, "error_code": ErrorCode.none, "error_message": None})
    if pending and timeout_s > 0:
        def gone() -> bool:
            return all((name, 0) not in broker.partition_views for _i, name in pending)

        if not await broker.wait_for_views(gone, timeout_s):
            for index, name in pending:
                if (name, 0) in broker.partition_views:
                    responses[index]["error_code"] = ErrorCode.request_timed_out
                    responses[index]["error_message"] = (f"topic {name!r} is marked for deletion; the controller "
                                                         f"has not removed it within {timeout_s:g} s")
    return responses


# ---------------------------------------------------------------------- FindCoordinator

def internal_topic_settings(broker: "BrokerApi", topic: str) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, configs) a cluster creates ``topic`` with: Kafka's
    ``offsets.topic.*`` / ``transaction.state.log.*`` settings, compacted;
    ``__transaction_state`` with ``min.insync.replicas`` = ``transaction.state.log.min.isr``
    (at most its replication factor)."""
    cfg = broker.config
    if topic == OFFSETS_TOPIC:
        return (cfg.offsets_topic_num_partitions, cfg.offsets_topic_replication_factor,
                {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)})
    return (cfg.transaction_state_log_num_partitions, cfg.transaction_state_log_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
             # capped at the replication factor: Kafka sets it as given, and an RF=1 topic with
             # min.isr 2 then refuses every coordinator write (NOT_ENOUGH_REPLICAS) for good
             "min.insync.replicas": str(min(cfg.transaction_state_log_min_isr,
                                            cfg.transaction_state_log_replication_factor))})


def _not_available(message: str) -> tuple[ErrorCode, str | None, int, str, int]:
    return ErrorCode.coordinator_not_available, message, -1, "", -1


async def find_coordinator(broker: "BrokerApi", topic: str,
                           key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of ``key``: the leader of its
    partition of ``topic`` (``__consumer_offsets`` or ``__transaction_state``), as Kafka's
    ZooKeeper-mode brokers answer. The first request creates the topic through ZooKeeper
    (COORDINATOR_NOT_AVAILABLE meanwhile, and while the partition has no live leader; with
    fewer live brokers than its replication factor the creation waits for them, as Kafka's)."""
    from ...net.coordinator_keys import partition_for

    views = topic_views(broker).get(topic)
    if not views:
        partitions, replication, configs = internal_topic_settings(broker, topic)
        code, message = await _create_one(broker, topic, partitions, replication, None, configs)
        if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            return _not_available(f"{topic} cannot be created yet: {message}")
        return _not_available(f"{topic} is being created; its leaders come in a moment")
    view = broker.partition_views.get((topic, partition_for(key, broker.cluster_partition_count(topic))))
    if view is None:  # that partition's view has not arrived yet
        return _not_available(f"{topic}'s partition for {key!r} is not known here yet")
    live = {b.broker_id: b for b in broker.cluster_view.brokers} if broker.cluster_view is not None else {}
    leader = live.get(view.leader)
    if leader is None:
        return _not_available(f"{topic}-{view.partition} has no live leader now")
    return ErrorCode.none, None, leader.broker_id, leader.host, leader.port
