"""The znodes of Kafka's ZooKeeper mode that pulllog writes and reads, with their formats.

No I/O here: paths, and JSON in and out, so the formats are plain unit tests. The formats are
Kafka's (ZooKeeper mode, Kafka 2.x / 3.x), so Kafka's own tools reading the same ZooKeeper see
what they expect. Paths are relative to the chroot of ``zookeeper.connect`` (``HOST:PORT/chroot``).

``/brokers/ids/<id>``: ephemeral, one per live broker (it vanishes with the broker's
ZooKeeper session), version 5::

    {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
     "endpoints": ["PLAINTEXT://127.0.0.2:9092"], "jmx_port": -1, "port": 9092,
     "host": "127.0.0.2", "version": 5, "timestamp": "1795631376871"}

  ``timestamp`` is the registration time in ms, as a string (Kafka writes it so).

``/controller``: ephemeral, the elected controller's id; whoever creates it is the controller
until its session ends::

    {"version": 1, "brokerid": 2, "timestamp": "1795631376871"}

``/controller_epoch``: persistent, the number of elections won so far, as decimal text
(``"3"``). It starts at 0; each new controller creates ``/controller`` and sets the epoch to
the one it read plus one *in one ZooKeeper transaction, conditional on the epoch's znode
version*, so two brokers can never win the same epoch, and a stale controller's writes can be
fenced by the epoch.

``/cluster/id``: persistent, the cluster's id, created by the first broker to start (with its
own ``meta.properties`` id) and taken by every later one, so all answer with one id::

    {"version": "1", "id": "Qh7n5FjdTzSVXZ4ecp2Hvw"}

``/brokers/topics/<topic>``: persistent, a topic's replica assignment (version 3, Kafka 2.8+;
``topic_id`` is the topic id in Kafka's text form: URL-safe base64 of its 16 bytes, no
padding; ``adding_replicas`` / ``removing_replicas`` name partitions under reassignment only)::

    {"version": 3, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
     "adding_replicas": {}, "removing_replicas": {}, "topic_id": "yU3VbXWkR9a8C7sEr1Z4lA"}

  Replica lists are in assignment order: the first is the partition's preferred leader.
  A partition under reassignment (KIP-455) lists its full replica set RS = target + origin
  (distinct, target first) under ``partitions``, the replicas being added (RS - origin)
  under ``adding_replicas`` and those being removed (RS - target) under
  ``removing_replicas``, e.g. a move of partition 0 from [1, 2] to [2, 3]::

    {"version": 3, "partitions": {"0": [2, 3, 1]}, "adding_replicas": {"0": [3]},
     "removing_replicas": {"0": [1]}, "topic_id": "yU3VbXWkR9a8C7sEr1Z4lA"}

  The origin is RS minus the adding replicas, the target RS minus the removing ones: what a
  controller elected later needs to finish (or cancel) the reassignment.

``/brokers/topics/<topic>/partitions/<p>/state``: persistent, the partition's leadership,
written by the controller (elections) and the leader (ISR changes), every write conditional on
the znode's version::

    {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2, 3]}

  ``leader`` is -1 while no replica can lead (every ISR replica is down and unclean election
  is off). Kafka 3.2+ adds ``leader_recovery_state`` (1: RECOVERING, after an unclean election
  on KRaft only) when it is not 0; pulllog never writes it and reads it as 0.

``/config/topics/<topic>``: persistent, the topic's config overrides (all values strings)::

    {"version": 1, "config": {"cleanup.policy": "compact"}}

``/admin/delete_topics/<topic>``: persistent, empty: a request to delete the topic. The
controller deletes the topic's znodes (state, partitions, assignment, config) and then this one;
the brokers drop the topic's logs when its assignment goes.

``/admin/preferred_replica_election``: persistent, a request for preferred-leader elections;
the controller runs them and deletes the znode::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}

``/latest_producer_id_block`` -- the last block of producer ids a broker claimed (Kafka's
ProducerIdBlockZNode; the ids are strings). A broker claims the next block of
``PRODUCER_ID_BLOCK_SIZE`` by rewriting it on condition of its version, so blocks never overlap;
the first broker's start creates it empty (the first block starts at 0)::

    {"version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from .state import LeaderAndIsr

__all__ = [
    "BROKER_IDS", "BROKER_TOPICS", "BrokerRegistration", "CLUSTER_ID", "CONFIG_TOPICS", "CONTROLLER",
    "CONTROLLER_EPOCH", "ClusterView", "ControllerRegistration", "DELETE_TOPICS", "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION", "PRODUCER_ID_BLOCK", "PRODUCER_ID_BLOCK_SIZE", "ProducerIdBlock",
    "TopicAssignment", "decode_producer_id_block", "encode_producer_id_block", "next_producer_id_block", "ZnodeFormatError", "broker_path", "decode_cluster_id",
    "decode_epoch", "decode_partition_state", "decode_preferred_election", "decode_topic_config",
    "decode_topic_id", "delete_topic_path", "encode_cluster_id", "encode_epoch", "encode_partition_state",
    "encode_preferred_election", "encode_topic_config", "encode_topic_id", "parse_zookeeper_connect",
    "partition_state_path", "partitions_path", "topic_config_path", "topic_path",
]

BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_TOPICS = "/brokers/topics"
CLUSTER_ID = "/cluster/id"
CONFIG_TOPICS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# Created (empty) at a broker's start when missing, as Kafka's brokers do: the parents of
# everything above, and the topic registry the next layer (topic assignments) fills.
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PERSISTENT_PATHS = ("/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/topics", "/admin/delete_topics",
                    PRODUCER_ID_BLOCK)
# Producer ids are handed to brokers in blocks of this many (Kafka's PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE = 1000

BROKER_ZNODE_VERSION = 5


class ZnodeFormatError(ValueError):
    """A znode whose data is not in the format Kafka's ZooKeeper mode uses."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker, as its ``/brokers/ids/<id>`` znode says."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        data: dict[str, object] = {
            "features": {},
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "endpoints": [f"PLAINTEXT://{self.host}:{self.port}"],
            "jmx_port": -1,
            "port": self.port,
            "host": self.host,
            "version": BROKER_ZNODE_VERSION,
            "timestamp": str(self.timestamp_ms or _now_ms()),
        }
        if self.rack is not None:
            data["rack"] = self.rack
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, broker_id: int, raw: bytes) -> BrokerRegistration:
        """From the znode's data. The PLAINTEXT endpoint is preferred (host/port are left out
        by a Kafka broker without a PLAINTEXT listener)."""
        data = _json_object(raw, broker_path(broker_id))
        host, port = data.get("host"), data.get("port")
        endpoints = data.get("endpoints")
        for endpoint in endpoints if isinstance(endpoints, list) else ():
            if isinstance(endpoint, str) and endpoint.startswith("PLAINTEXT://"):
                host, _, port_text = endpoint[len("PLAINTEXT://"):].rpartition(":")
                port = int(port_text) if port_text.isdigit() else None
                break
        if not isinstance(host, str) or not host or not isinstance(port, int) or port < 0:
            raise ZnodeFormatError(f"{broker_path(broker_id)}: no PLAINTEXT endpoint (host and port) in {raw!r}")
        rack = data.get("rack")
        return cls(broker_id, host, port, rack if isinstance(rack, str) else None, _int_or_zero(data.get("timestamp")))


@dataclass(frozen=True)
class ControllerRegistration:
    """The ``/controller`` znode: which broker is the controller."""

    broker_id: int
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        data = {"version": 1, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms or _now_ms())}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ControllerRegistration:
        data = _json_object(raw, CONTROLLER)
        broker_id = data.get("brokerid")
        if not isinstance(broker_id, int):
            raise ZnodeFormatError(f"{CONTROLLER}: no integer 'brokerid' in {raw!r}")
        return cls(broker_id, _int_or_zero(data.get("timestamp")))


def encode_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_epoch(raw: bytes) -> int:
    try:
        return int(raw.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH}: not a decimal number: {raw!r}") from None


@dataclass(frozen=True)
class ClusterView:
    """What one broker knows of the cluster: the live brokers (by id) and the controller
    (-1 while there is none, e.g. between a controller's death and the next election)."""

    brokers: tuple[BrokerRegistration, ...] = ()
    controller_id: int = -1
    controller_epoch: int = 0


def parse_zookeeper_connect(connect: str) -> tuple[str, str]:
    """``HOST:PORT[,HOST:PORT...][/chroot]`` -> (hosts, chroot); chroot ``""`` for the root.

    Kafka's syntax: the chroot follows the last host and applies to all of them."""
    text = connect.strip()
    hosts, slash, chroot = text.partition("/")
    if not hosts or any(not h.strip() or ":" not in h for h in hosts.split(",")):
        raise ValueError(f"zookeeper.connect={connect!r}: expected HOST:PORT[,HOST:PORT...][/chroot], "
                         "e.g. 127.0.0.1:2181/pulllog")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def _json_object(raw: bytes, path: str) -> dict[str, object]:
    try:
        data = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{path}: not JSON: {raw!r}") from None
    if not isinstance(data, dict):
        raise ZnodeFormatError(f"{path}: not a JSON object: {raw!r}")
    return data


def _int_or_zero(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------------- topics

def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a topic id (``Uuid.toString``): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError):
        raise ZnodeFormatError(f"not a Kafka topic id (22 characters of URL-safe base64): {text!r}") from None


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's ``/brokers/topics/<topic>`` znode: its id and every partition's replicas."""

    topic: str
    topic_id: uuid.UUID
    partitions: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    # Partitions under reassignment only (KIP-455): the replicas being added / removed.
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        data = {
            "version": 3,
            "partitions": {str(p): list(replicas) for p, replicas in sorted(self.partitions.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted(self.adding.items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted(self.removing.items()) if r},
            "topic_id": encode_topic_id(self.topic_id),
        }
        return json.dumps(data, separators=(",", ":")).encode()

    def reassigning(self, partition: int) -> bool:
        return bool(self.adding.get(partition) or self.removing.get(partition))

    @classmethod
    def decode(cls, topic: str, raw: bytes) -> TopicAssignment:
        """From the znode. A version 1 / 2 znode (Kafka before 2.8) has no ``topic_id``: one is
        derived from the name, so every broker reading it agrees on it."""
        path = topic_path(topic)
        data = _json_object(raw, path)
        parts = data.get("partitions")
        if not isinstance(parts, dict):
            raise ZnodeFormatError(f"{path}: no 'partitions' object in {raw!r}")
        partitions = _replica_lists(path, "partitions", parts, raw)
        # Version 1 znodes have neither (no reassignment could be under way in their format).
        adding = _replica_lists(path, "adding_replicas", data.get("adding_replicas") or {}, raw)
        removing = _replica_lists(path, "removing_replicas", data.get("removing_replicas") or {}, raw)
        text = data.get("topic_id")
        topic_id = (decode_topic_id(text) if isinstance(text, str)
                    else uuid.uuid5(uuid.NAMESPACE_URL, f"kafka-topic:{topic}"))
        return cls(topic, topic_id, partitions,
                   {p: r for p, r in adding.items() if r and p in partitions},
                   {p: r for p, r in removing.items() if r and p in partitions})


def _replica_lists(path: str, name: str, parts: object, raw: bytes) -> dict[int, tuple[int, ...]]:
    if not isinstance(parts, dict):
        raise ZnodeFormatError(f"{path}: {name!r} is not an object in {raw!r}")
    out: dict[int, tuple[int, ...]] = {}
    for key, replicas in parts.items():
        if not key.isdigit() or not isinstance(replicas, list) or not all(isinstance(r, int) for r in replicas):
            raise ZnodeFormatError(f"{path}: {name} of partition {key!r} is not a list of broker ids: {replicas!r}")
        out[int(key)] = tuple(replicas)
    return out


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    data = {"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
            "leader_epoch": state.leader_epoch, "isr": list(state.isr)}
    return json.dumps(data, separators=(",", ":")).encode()


def decode_partition_state(topic: str, partition: int, raw: bytes, zk_version: int = -1) -> LeaderAndIsr:
    path = partition_state_path(topic, partition)
    data = _json_object(raw, path)
    leader, epoch, isr, controller_epoch = (data.get("leader"), data.get("leader_epoch"), data.get("isr"),
                                            data.get("controller_epoch"))
    if not (isinstance(leader, int) and isinstance(epoch, int) and isinstance(controller_epoch, int)
            and isinstance(isr, list) and all(isinstance(b, int) for b in isr)):
        raise ZnodeFormatError(f"{path}: expected integer leader, leader_epoch, controller_epoch and an isr list "
                               f"in {raw!r}")
    return LeaderAndIsr(leader, epoch, tuple(isr), controller_epoch, zk_version)


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(sorted(configs.items()))}, separators=(",", ":")).encode()


def decode_topic_config(topic: str, raw: bytes | None) -> dict[str, str]:
    """A missing or empty znode is no overrides (Kafka reads it so)."""
    if not raw:
        return {}
    config = _json_object(raw, topic_config_path(topic)).get("config")
    if not isinstance(config, dict):
        return {}
    return {str(k): str(v) for k, v in config.items()}


def encode_preferred_election(partitions: list[tuple[str, int]]) -> bytes:
    data = {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    return json.dumps(data, separators=(",", ":")).encode()


def decode_preferred_election(raw: bytes) -> list[tuple[str, int]]:
    parts = _json_object(raw, PREFERRED_REPLICA_ELECTION).get("partitions")
    out = []
    for entry in parts if isinstance(parts, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("topic"), str) and isinstance(entry.get("partition"), int):
            out.append((entry["topic"], entry["partition"]))
    return out


def encode_cluster_id(cluster_id: str) -> bytes:
    return json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode()


def decode_cluster_id(raw: bytes) -> str:
    cluster_id = _json_object(raw, CLUSTER_ID).get("id")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ZnodeFormatError(f"{CLUSTER_ID}: no 'id' in {raw!r}")
    return cluster_id


# ---------------------------------------------------------------------- producer ids


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``first``..``last`` (both included), claimed by broker ``broker``."""

    broker: int
    first: int
    last: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    # The ids are JSON strings in Kafka's format (a long does not survive every JSON parser).
    return json.dumps({"version": 1, "broker": block.broker, "block_start": str(block.first),
                       "block_end": str(block.last)}, separators=(",", ":")).encode()


def decode_producer_id_block(raw: bytes | None) -> ProducerIdBlock | None:
    """The last block claimed; None for the empty znode a first broker's start created."""
    if not raw:
        return None
    data = _json_object(raw, PRODUCER_ID_BLOCK)
    try:
        return ProducerIdBlock(int(data["broker"]), int(data["block_start"]),  # type: ignore[call-overload]
                               int(data["block_end"]))  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"{PRODUCER_ID_BLOCK}: no broker, block_start and block_end in {raw!r}") from None


def next_producer_id_block(last: ProducerIdBlock | None, broker_id: int) -> ProducerIdBlock:
    """The block after ``last`` (the first one, from 0, when none was claimed), for ``broker_id``."""
    first = 0 if last is None else last.last + 1
    if first > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
        raise ZnodeFormatError(f"{PRODUCER_ID_BLOCK}: every producer id has been handed out")
    return ProducerIdBlock(broker_id, first, first + PRODUCER_ID_BLOCK_SIZE - 1)
