"""What a client knows about the cluster: brokers, topics, partition leaders, connections.

Bootstrap servers are tried in order until one answers; after that, Metadata responses
say which broker leads each partition, and connections to brokers are opened lazily and
reused (each reads through a protocol of the event loop: no task per connection), and
``close()`` closes them all. Metadata is refreshed on a timer (``metadata_max_age_ms``) and whenever a caller
saw a sign that it is stale (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a lost
connection).

Which broker answers Metadata: as Kafka's clients (their least-loaded node), the open connection
with the fewest requests in flight, ties taken in turn from a rotating start, so one broker whose
view of the cluster lags cannot trap a client; and, as Kafka's clients do since KIP-320, a
partition's answer with an older leader epoch than the one known (same topic id) is ignored.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .connection import BrokerUnreachableError, ConnectionClosedError, KafkaConnection
from .errors import KafkaError, UnknownTopicError

__all__ = ["Cluster", "KafkaError", "PartitionInfo", "TopicInfo", "UnknownTopicError", "parse_bootstrap"]

log = logging.getLogger("pulllog.client")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            raise ValueError(f"bad bootstrap server {item!r}: expected HOST:PORT, e.g. 127.0.0.1:9092") from None
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata lists it. ``leader`` is -1 while it has none (every in-sync
    replica is down); ``offline_replicas`` are replicas on a broker that is down or whose log
    directory failed (Metadata v5+); ``leader_epoch`` is -1 from brokers before Metadata v7."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    leader_epoch: int = -1


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False


class Cluster:
    def __init__(
        self,
        bootstrap_servers: str | Iterable[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "pulllog",
        request_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 300_000,
        connect_timeout_ms: int = 10_000,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self._connections: dict[int, KafkaConnection] = {}
        self._opened: weakref.WeakSet[KafkaConnection] = weakref.WeakSet()  # every one, for close()
        self._bootstrap_conn: KafkaConnection | None = None
        self._connect_locks: dict[int, asyncio.Lock] = {}
        self._refresh_lock = asyncio.Lock()
        self._metadata_turn = 0  # rotates the start of the search for the least-loaded node
        self._last_refresh = 0.0
        self._closed = False

    # ------------------------------------------------------------------ connections

    async def _connect(self, host: str, port: int) -> KafkaConnection:
        if self._closed:
            raise ConnectionClosedError(f"the client {self.client_id!r} is closed")
        try:
            return await self.connect(host, port, timeout=self.connect_timeout_ms / 1000)
        except BrokerUnreachableError:
            if not await _resolves(host, port):
                raise BrokerUnreachableError(
                    f"cannot connect to {host}:{port}: the host {host!r} does not resolve; "
                    "check the host name in --bootstrap-server / bootstrap.servers") from None
            raise
        except ConnectionClosedError:
            # Every Kafka broker answers ApiVersions, even one too old for the version asked
            # (KIP-511): a peer that closes instead, or sends a frame that never ends (an HTTP
            # reply read as a size prefix), is some other server.
            raise BrokerUnreachableError(
                f"{host}:{port} is not a Kafka broker: it did not answer ApiVersions; "
                "check the port in --bootstrap-server / bootstrap.servers") from None

    async def connect(self, host: str, port: int, *, timeout: float) -> KafkaConnection:
        """A new connection, closed by ``close()`` at the latest."""
        if self._closed:
            raise ConnectionClosedError(f"the client {self.client_id!r} is closed")
        conn = await KafkaConnection.connect(host, port, client_id=self.client_id, timeout=timeout)
        self._opened.add(conn)
        return conn

    async def any_connection(self) -> KafkaConnection:
        """A live connection to some broker: an open one, else the bootstrap servers in turn."""
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        candidates = list(self.brokers.values()) + self.bootstrap
        for host, port in candidates:
            try:
                self._bootstrap_conn = await self._connect(host, port)
                return self._bootstrap_conn
            except BrokerUnreachableError as exc:
                errors.append(str(exc))
        if len(self.bootstrap) == 1 and not self.brokers:
            raise BrokerUnreachableError(errors[0])
        raise BrokerUnreachableError(
            "no broker reachable: " + "; ".join(f"{h}:{p}" for h, p in candidates)
            + " (start one with `pulllog serve`)")

    async def least_loaded_connection(self) -> KafkaConnection:
        """The connection to ask for metadata: of the open ones, the one with the fewest
        requests in flight, the search starting one further each time (ties go to each broker
        in turn); none open: :meth:`any_connection`."""
        candidates = [c for c in self._connections.values() if not c.closed]
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            candidates.append(self._bootstrap_conn)
        if not candidates:
            return await self.any_connection()
        self._metadata_turn += 1
        start = self._metadata_turn % len(candidates)
        return min(candidates[start:] + candidates[:start], key=lambda c: c.in_flight)

    def connected(self, node_id: int) -> KafkaConnection | None:
        """The open connection to ``node_id``, or None (no waiting, no connecting)."""
        conn = self._connections.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int) -> KafkaConnection:
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connect_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            if node_id not in self.brokers:
                await self.refresh()
            if node_id not in self.brokers:
                raise BrokerUnreachableError(f"broker {node_id} is not in the cluster metadata")
            host, port = self.brokers[node_id]
            conn = await self._connect(host, port)
            self._connections[node_id] = conn
            return conn

    async def leader_connection(self, topic: str, partition: int) -> KafkaConnection:
        info = await self.partition_info(topic, partition)
        return await self.connection(info.leader)

    # ------------------------------------------------------------------ metadata

    @property
    def metadata_stale(self) -> bool:
        return (time.monotonic() - self._last_refresh) * 1000 > self.metadata_max_age_ms

    async def refresh(self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False) -> None:
        """Fetch metadata for ``topics`` (None: all topics) and merge it in."""
        async with self._refresh_lock:
            conn = await self.least_loaded_connection()
            version = conn.version("metadata", 1, 12)
            wanted = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
            data = {"topics": wanted, "allow_auto_topic_creation": allow_auto_create,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False}
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that
            # arrives as the answer does, and the task cancelled (a consumer's group task at close)
            # would run on.
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                resp = await conn.request("metadata", version, data)
            self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
            self.cluster_id = getattr(resp, "cluster_id", None)
            self.controller_id = int(getattr(resp, "controller_id", -1))
            known = self.topics
            if topics is None:
                self.topics = {}
            for t in resp.topics:
                if t.error_code != ErrorCode.none:
                    self.topics.pop(t.name, None)
                    continue
                info = TopicInfo(t.name, getattr(t, "topic_id", None), internal=bool(getattr(t, "is_internal", False)))
                for p in t.partitions:
                    info.partitions[int(p.partition_index)] = PartitionInfo(
                        t.name, int(p.partition_index), int(p.leader_id),
                        tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes),
                        tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                        int(getattr(p, "leader_epoch", -1)))
                _keep_newer_leaders(info, known.get(t.name))
                self.topics[t.name] = info
            self._last_refresh = time.monotonic()

    async def topic(self, name: str, *, allow_auto_create: bool = False) -> TopicInfo:
        info = self.topics.get(name)
        if info is None or self.metadata_stale:
            await self.refresh([name], allow_auto_create=allow_auto_create)
            info = self.topics.get(name)
        if info is None:
            raise UnknownTopicError(name)
        return info

    async def partitions_for(self, topic: str, *, allow_auto_create: bool = False) -> list[int]:
        return sorted((await self.topic(topic, allow_auto_create=allow_auto_create)).partitions)

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        info = await self.topic(topic)
        p = info.partitions.get(partition)
        if p is None:
            await self.refresh([topic])
            p = self.topics[topic].partitions.get(partition) if topic in self.topics else None
        if p is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} has no partition {partition}")
        return p

    def invalidate(self, topic: str | None = None) -> None:
        """Mark metadata stale (after NOT_LEADER, UNKNOWN_TOPIC, or a lost connection)."""
        if topic is None:
            self._last_refresh = 0.0
        else:
            self.topics.pop(topic, None)

    async def close(self) -> None:
        self._closed = True
        conns = list(dict.fromkeys([*self._connections.values(), *self._opened]))
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        self._bootstrap_conn = None
        for conn in conns:
            await conn.close()


def _keep_newer_leaders(info: TopicInfo, known: TopicInfo | None) -> None:
    """KIP-320: a partition whose answer has an older leader epoch than the one this client
    knows for the same topic keeps what it knows (the answering broker's view lags)."""
    if known is None or info.topic_id is None or known.topic_id != info.topic_id:
        return
    for index, partition in info.partitions.items():
        before = known.partitions.get(index)
        if before is not None and 0 <= partition.leader_epoch < before.leader_epoch:
            info.partitions[index] = before


async def _resolves(host: str, port: int) -> bool:
    """Whether ``host`` has an address: asked only after a connection failed, to tell a typo
    in the host name from a broker that is down."""
    try:
        await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return True
