"""The transactional producer's requests to its coordinators, with Kafka's retry rules.

A transactional producer talks to two coordinators besides the partition leaders: the
transaction coordinator of its ``transactional_id`` (FindCoordinator key type 1:
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and, for
``send_offsets_to_transaction``, the group coordinator of the consumer group (key type 0:
TxnOffsetCommit). Each gets a connection of its own, so these requests never queue behind
a Produce or a Fetch.

``TxnCoordinatorClient.call`` sends one request and reads every error code in its answer
through ``pulllog.client.transactions.outcome``: retriable codes send it again after
``retry_backoff_ms`` (sooner for a transaction's first AddPartitionsToTxn refused with
CONCURRENT_TRANSACTIONS: ``transactions.retry_backoff_s``; NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, a lost connection or a timeout find the coordinator again
first); others move the ``TransactionManager`` to its abortable or fatal state, and the
call raises that error. Requests go one at a time (a
lock), as Kafka's client sends them. A call that cannot finish within ``max_block_ms``
raises TimeoutError and changes no state: calling the operation again resumes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster import Cluster
from .connection import KafkaConnection, UnsupportedByBrokerError
from .errors import KafkaError
from .transactions import Outcome, TransactionManager, gravest, outcome, retry_backoff_s

__all__ = ["GROUP", "TRANSACTION", "TxnCoordinatorClient"]

log = logging.getLogger("pulllog.client.producer")

GROUP, TRANSACTION = 0, 1  # FindCoordinator key types

# The versions asked for: those that need the partitions added before a Produce (the
# "transaction version 1" protocol librdkafka and older Java clients speak, which every
# broker since 2.x serves; KIP-890's v5 EndTxn and v12 Produce are for another day).
VERSIONS = {"find_coordinator": (0, 4), "init_producer_id": (0, 4), "add_partitions_to_txn": (0, 3),
            "add_offsets_to_txn": (0, 3), "txn_offset_commit": (0, 3), "end_txn": (0, 4)}

ErrorCodes = Callable[[Any], Iterable[ErrorCode]]


def _top_level(resp: Any) -> list[ErrorCode]:
    return [resp.error_code]


class TxnCoordinatorClient:
    """Finds the coordinators and sends the transactional requests (see the module docstring)."""

    def __init__(self, cluster: Cluster, manager: TransactionManager, *, request_timeout_ms: int,
                 retry_backoff_ms: int, max_block_ms: int) -> None:
        self.cluster = cluster
        self.manager = manager
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = max(retry_backoff_ms / 1000, 0.01)
        self.max_block_s = max_block_ms / 1000
        self._conns: dict[tuple[int, str], KafkaConnection] = {}
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    # ------------------------------------------------------------------ the requests

    async def init_producer_id(self) -> tuple[int, int]:
        lowest, _highest, data = self.manager.init_producer_id_request()
        resp = await self.call("init_producer_id", data, _top_level, lowest=lowest)
        return int(resp.producer_id), int(resp.producer_epoch)

    async def add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        m = self.manager
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        await self.call("add_partitions_to_txn", {
            "v3_and_below_transactional_id": m.transactional_id, "v3_and_below_producer_id": m.producer_id,
            "v3_and_below_producer_epoch": m.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            lambda resp: [p.partition_error_code for t in resp.results_by_topic_v3_and_below
                          for p in t.results_by_partition])

    async def add_offsets(self, group_id: str) -> None:
        m = self.manager
        await self.call("add_offsets_to_txn", {
            "transactional_id": m.transactional_id, "producer_id": m.producer_id,
            "producer_epoch": m.producer_epoch, "group_id": group_id}, _top_level)

    async def txn_offset_commit(self, offsets: Mapping[tuple[str, int], tuple[int, str | None]], group_id: str,
                                generation_id: int, member_id: str, group_instance_id: str | None) -> None:
        m = self.manager
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (offset, metadata) in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                "committed_metadata": metadata})
        await self.call("txn_offset_commit", {
            "transactional_id": m.transactional_id, "group_id": group_id, "producer_id": m.producer_id,
            "producer_epoch": m.producer_epoch, "generation_id": generation_id, "member_id": member_id,
            "group_instance_id": group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            lambda resp: [p.error_code for t in resp.topics for p in t.partitions],
            key_type=GROUP, key=group_id)

    async def end_txn(self, commit: bool) -> None:
        m = self.manager
        await self.call("end_txn", {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                    "producer_epoch": m.producer_epoch, "committed": commit}, _top_level)

    # ------------------------------------------------------------------ retries

    async def call(self, api: str, data: Mapping[str, Any], errors: ErrorCodes, *, key_type: int = TRANSACTION,
                   key: str | None = None, lowest: int | None = None) -> Any:
        """Send ``api`` to the coordinator until it answers without an error code; raise the
        manager's abortable or fatal error, or TimeoutError after ``max_block_ms``."""
        key = self.manager.transactional_id if key is None else key
        lo, hi = VERSIONS[api]
        lo = lo if lowest is None else lowest
        deadline = time.monotonic() + self.max_block_s
        last: str = "no attempt yet"
        attempt = 0
        async with self._lock:
            while True:
                attempt += 1
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{api} for {'group' if key_type == GROUP else 'transactional id'} {key!r} "
                                       f"did not complete within max_block_ms={round(self.max_block_s * 1000)} "
                                       f"(last: {last}); call the operation again to resume it")
                try:
                    conn = await self._coordinator(key_type, key, deadline)
                    version = conn.version(api, lo, hi)
                    async with asyncio.timeout(min(self.request_timeout_s, max(deadline - time.monotonic(), 0.001))):
                        resp = await conn.request(api, version, data)
                except UnsupportedByBrokerError as exc:
                    raise self.manager.fail(Outcome.FATAL, KafkaError(ErrorCode.unsupported_version, str(exc))) from None
                except _Retry as exc:
                    last = str(exc)
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                except (ConnectionError, TimeoutError) as exc:
                    last = str(exc) or f"no answer to {api}"
                    await self._forget(key_type, key)
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                codes = [ErrorCode(int(c)) for c in errors(resp) if c != ErrorCode.none]
                result = gravest(outcome(api, c) for c in codes)
                if result is None:
                    return resp
                first = next(c for c in codes if outcome(api, c) is result)
                last = first.name.upper()
                if result in (Outcome.RETRY, Outcome.REDISCOVER):
                    log.debug("%s for %r: %s, retrying", api, key, last)
                    if result is Outcome.REDISCOVER:
                        await self._forget(key_type, key)
                    await asyncio.sleep(retry_backoff_s(api, first, attempt, not self.manager.in_transaction,
                                                        self.retry_backoff_s))
                    continue
                raise self.manager.fail(result, KafkaError(first, f"{last}: {api} for {key!r} failed"))

    async def _coordinator(self, key_type: int, key: str, deadline: float) -> KafkaConnection:
        conn = self._conns.get((key_type, key))
        if conn is not None and not conn.closed:
            return conn
        any_conn = await self.cluster.any_connection()
        version = any_conn.version("find_coordinator", *VERSIONS["find_coordinator"])
        async with asyncio.timeout(min(self.request_timeout_s, max(deadline - time.monotonic(), 0.001))):
            resp = await any_conn.request("find_coordinator", version, {
                "key": key, "key_type": key_type, "coordinator_keys": [key]})
        entry = resp.coordinators[0] if version >= 4 else resp
        code = ErrorCode(int(entry.error_code))
        if code != ErrorCode.none:
            result = outcome("find_coordinator", code)
            if result in (Outcome.RETRY, Outcome.REDISCOVER):
                raise _Retry(f"FindCoordinator: {code.name.upper()}")
            raise self.manager.fail(result, KafkaError(code, (
                f"{code.name.upper()}: no coordinator for {'group' if key_type == GROUP else 'transactional id'} "
                f"{key!r}" + (f" ({entry.error_message})" if getattr(entry, "error_message", None) else ""))))
        node = int(entry.node_id)
        host, port = self.cluster.brokers.get(node, (entry.host, int(entry.port)))
        conn = await self.cluster.connect(host, port, timeout=self.request_timeout_s)
        self._conns[(key_type, key)] = conn
        return conn

    async def _forget(self, key_type: int, key: str) -> None:
        conn = self._conns.pop((key_type, key), None)
        if conn is not None:
            await conn.close()


class _Retry(Exception):
    """FindCoordinator answered with a retriable error: try again after the backoff."""
