"""Requests to a consumer group's coordinator: one method per API, and no group state.

FindCoordinator names the broker that coordinates the group. The consumer talks to it over
two connections of its own, apart from the ones the fetcher uses:

    join    JoinGroup and SyncGroup. The coordinator holds these until the rebalance
            completes (up to the rebalance timeout).
    main    Heartbeat, OffsetCommit, OffsetFetch, LeaveGroup.

A broker handles the requests of one connection one at a time, in order. On a shared
connection a Heartbeat would wait behind a held SyncGroup, and a commit behind a Fetch's
long poll.

A lost connection, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE mean that the coordinator
moved or went away. Both connections are dropped (:meth:`GroupClient.mark_dead`) and the
next request finds the coordinator again. The error codes of the answers go back to the
caller, which decides what they mean for the group (see :mod:`pulllog.client.membership`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from .connection import BrokerUnreachableError, ConnectionClosedError, KafkaConnection
from .cluster import Cluster
from .errors import KafkaError, error_for
from .types import TopicPartition

__all__ = ["COORDINATOR_MOVED", "CoordinatorUnavailableError", "GroupClient"]

log = logging.getLogger("pulllog.client")

# Answers that mean "ask FindCoordinator again".
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})


class CoordinatorUnavailableError(KafkaError):
    """The group's coordinator could not be reached (yet); retriable."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.coordinator_not_available, message)
        self.retriable = True


class GroupClient:
    def __init__(self, cluster: Cluster, group_id: str, *, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.coordinator: tuple[int, str, int] | None = None  # node id, host, port
        self._conns: dict[str, KafkaConnection] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ the coordinator

    async def _connection(self, which: str) -> KafkaConnection:
        conn = self._conns.get(which)
        if conn is not None and not conn.closed:
            return conn
        async with self._lock:
            conn = self._conns.get(which)
            if conn is not None and not conn.closed:
                return conn
            if self._closed:
                raise ConnectionClosedError(f"the consumer of group {self.group_id!r} is closed")
            if self.coordinator is None:
                self.coordinator = await self._find_coordinator()
            node, host, port = self.coordinator
            try:
                conn = await self.cluster.connect(host, port, timeout=self.request_timeout_s)
            except BrokerUnreachableError:
                self.coordinator = None
                raise
            self._conns[which] = conn
            log.debug("group %s: connected to coordinator %d at %s:%d (%s)", self.group_id, node, host, port, which)
            return conn

    async def _find_coordinator(self) -> tuple[int, str, int]:
        conn = await self.cluster.any_connection()
        version = conn.version("find_coordinator", 0, 4)
        try:
            async with asyncio.timeout(self.request_timeout_s):
                resp = await conn.request("find_coordinator", version, {
                    "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]})
        except TimeoutError:
            raise CoordinatorUnavailableError(
                f"{conn.address} did not answer FindCoordinator for group {self.group_id!r}") from None
        entry = resp.coordinators[0] if version >= 4 else resp
        if entry.error_code != ErrorCode.none:
            if entry.error_code in COORDINATOR_MOVED or entry.error_code == ErrorCode.coordinator_load_in_progress:
                raise CoordinatorUnavailableError(
                    f"no coordinator for group {self.group_id!r} yet ({entry.error_code.name.upper()})")
            raise error_for(entry.error_code, f"finding the coordinator of group {self.group_id!r} failed: "
                                              f"{entry.error_code.name.upper()}")
        node = int(entry.node_id)
        host, port = self.cluster.brokers.get(node, (entry.host, int(entry.port)))
        return node, host, port

    async def mark_dead(self, why: str) -> None:
        """Forget the coordinator and drop its connections (requests in flight on them fail
        at once); the next request finds it again."""
        if self.coordinator is not None:
            log.info("group %s: coordinator %d unavailable (%s); finding it again",
                     self.group_id, self.coordinator[0], why)
        self.coordinator = None
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    async def _call(self, which: str, api: str, lo: int, hi: int, data: Mapping[str, Any],
                    timeout_s: float | None = None) -> tuple[int, Any]:
        """One request; a lost connection or a timeout marks the coordinator dead and raises
        CoordinatorUnavailableError."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            conn = await self._connection(which)
            version = conn.version(api, lo, hi)
            async with asyncio.timeout(timeout_s):
                return version, await conn.request(api, version, data)
        except (ConnectionError, TimeoutError) as exc:
            reason = str(exc) or f"no answer to {api} within {timeout_s:g} s"
            await self.mark_dead(reason)
            raise CoordinatorUnavailableError(f"{api} to the coordinator failed: {reason}") from None

    # ------------------------------------------------------------------ membership

    async def join(self, member_id: str, group_instance_id: str | None, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocols: Sequence[tuple[str, bytes]], reason: str) -> Any:
        # The coordinator holds a JoinGroup for up to the rebalance timeout (as Kafka's client does,
        # allow five seconds more before giving up on it).
        timeout_s = max(self.request_timeout_s, rebalance_timeout_ms / 1000 + 5)
        _v, resp = await self._call("join", "join_group", 1, 9, {
            "group_id": self.group_id, "session_timeout": session_timeout_ms,
            "rebalance_timeout": rebalance_timeout_ms, "member_id": member_id,
            "group_instance_id": group_instance_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": metadata} for name, metadata in protocols],
            "reason": reason}, timeout_s)
        return resp

    async def sync(self, generation: int, member_id: str, group_instance_id: str | None, protocol_name: str,
                   assignments: Mapping[str, bytes], rebalance_timeout_ms: int) -> Any:
        timeout_s = max(self.request_timeout_s, rebalance_timeout_ms / 1000 + 5)
        _v, resp = await self._call("join", "sync_group", 0, 5, {
            "group_id": self.group_id, "generation_id": generation, "member_id": member_id,
            "group_instance_id": group_instance_id, "protocol_type": "consumer", "protocol_name": protocol_name,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]}, timeout_s)
        return resp

    async def heartbeat(self, generation: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        _v, resp = await self._call("main", "heartbeat", 0, 4, {
            "group_id": self.group_id, "generation_id": generation, "member_id": member_id,
            "group_instance_id": group_instance_id})
        if resp.error_code in COORDINATOR_MOVED:
            await self.mark_dead(resp.error_code.name.upper())
        return resp.error_code

    async def leave(self, member_id: str, reason: str) -> ErrorCode:
        version, resp = await self._call("main", "leave_group", 0, 5, {
            "group_id": self.group_id, "member_id": member_id,
            "members": [{"member_id": member_id, "group_instance_id": None, "reason": reason}]})
        if version >= 3 and resp.error_code == ErrorCode.none and resp.members:
            return resp.members[0].error_code
        return resp.error_code

    # ------------------------------------------------------------------ offsets

    async def commit_offsets(self, generation: int, member_id: str, group_instance_id: str | None,
                             offsets: Mapping[TopicPartition, tuple[int, str]]) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, (offset, metadata) in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": offset, "committed_leader_epoch": -1,
                "committed_metadata": metadata})
        _v, resp = await self._call("main", "offset_commit", 2, 8, {
            "group_id": self.group_id, "generation_id_or_member_epoch": generation, "generation_id": generation,
            "member_id": member_id, "group_instance_id": group_instance_id, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        out = {TopicPartition(t.name, int(p.partition_index)): p.error_code for t in resp.topics for p in t.partitions}
        if any(code in COORDINATOR_MOVED for code in out.values()):
            await self.mark_dead("NOT_COORDINATOR")
        for tp in offsets:
            out.setdefault(tp, ErrorCode.unknown_topic_or_partition)
        return out

    async def fetch_offsets(self, partitions: Sequence[TopicPartition]
                            ) -> dict[TopicPartition, tuple[ErrorCode, int, str]]:
        """{tp: (error, committed offset or -1, metadata)}; a group-level error applies to all."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        version, resp = await self._call("main", "offset_fetch", 1, 8, {
            "group_id": self.group_id, "topics": topics, "require_stable": True,
            "groups": [{"group_id": self.group_id, "topics": topics}]})
        if version >= 8:
            group = resp.groups[0]
            group_error, answer = group.error_code, group.topics
        else:
            group_error, answer = getattr(resp, "error_code", ErrorCode.none), resp.topics
        if group_error in COORDINATOR_MOVED:
            await self.mark_dead(group_error.name.upper())
        out: dict[TopicPartition, tuple[ErrorCode, int, str]] = {}
        for t in answer:
            for p in t.partitions:
                code = group_error if group_error != ErrorCode.none else p.error_code
                out[TopicPartition(t.name, int(p.partition_index))] = (code, int(p.committed_offset), p.metadata or "")
        for tp in partitions:
            out.setdefault(tp, (group_error, -1, ""))
        return out

