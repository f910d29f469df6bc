"""A cluster member's transaction markers for partitions other brokers lead (Kafka's
TransactionMarkerChannelManager): WriteTxnMarkers (27) to each partition's leader.

The transaction coordinator's marker writer is synchronous (txn/coordinator.py: a request's
state change, its appends and its markers happen in one step on the loop). In a cluster,
:meth:`TxnMarkerSender.write` keeps that contract:

* a partition this broker leads (or that the cluster does not know) gets its marker here,
  through :func:`~pulllog.broker.txn_markers.write_txn_markers`;
* a partition another broker leads answers REQUEST_TIMED_OUT ("not yet": the coordinator
  keeps it among the transaction's pending partitions) and a WriteTxnMarkers goes to the
  leader in a task; its answer is kept by (producer id, producer epoch, result, coordinator
  epoch, partition), and the task then runs the coordinator's ``complete_pending``, whose
  call of ``write`` picks it up. A transaction's EndTxn thus answers once PrepareCommit /
  PrepareAbort is logged, as Kafka's does; the producer's next transaction hears
  CONCURRENT_TRANSACTIONS until every marker is written.
* A failed send (the leader died, NOT_LEADER_OR_FOLLOWER) is retried after
  ``_RETRY_BACKOFF_S`` against the partition's leader of that moment.
* A partition without a leader (-1: its replicas are all gone, or an election is under
  way) gets no request; it waits in ``waiting_for_leader`` and the broker's next views
  (:meth:`TxnMarkerSender.views_changed`) send its marker as soon as one names a leader, as
  Kafka's marker channel re-queues the markers of an unknown leader on a metadata change
  (not the coordinator's periodic retry, ``transaction.abort.timed.out.transaction.
  cleanup.interval.ms``).

Its connections are plain asyncio streams on net/'s codec, one per request (markers are a
few per transaction); the broker never imports the client package.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ..net.apis import ApiKey
from .inter_broker import exchange, registered_address
from .txn_markers import write_txn_markers

__all__ = ["MARKER_IN_FLIGHT", "TxnMarkerSender"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
MarkerKey = tuple[int, int, bool, int, TopicPartition]
MARKER_IN_FLIGHT = ErrorCode.request_timed_out
_VERSION = 1
_RETRY_BACKOFF_S = 0.2
_REQUEST_TIMEOUT_S = 30.0
# Answers that a later attempt may change: leadership moved, or the ISR was short.
_RETRIED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
                      ErrorCode.not_enough_replicas_after_append, ErrorCode.kafka_storage_error})


class TxnMarkerSender:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.answers: dict[MarkerKey, ErrorCode] = {}
        self.in_flight: set[MarkerKey] = set()
        self.waiting_for_leader: set[TopicPartition] = set()
        self._correlation_id = 0

    def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: Iterable[TopicPartition]) -> Mapping[TopicPartition, ErrorCode]:
        """The coordinator's marker writer (module docstring)."""
        broker = self.broker
        own_id = broker.config.node_id
        local: list[TopicPartition] = []
        results: dict[TopicPartition, ErrorCode] = {}
        remote: dict[int, list[MarkerKey]] = {}
        for tp in partitions:
            view = broker.partition_views.get(tp)
            if view is None or view.leader == own_id:
                local.append(tp)
                continue
            key = (producer_id, producer_epoch, commit, coordinator_epoch, tp)
            answer = self.answers.pop(key, None)
            if answer is not None:
                results[tp] = answer
                continue
            results[tp] = MARKER_IN_FLIGHT
            if key in self.in_flight:
                continue
            if view.leader < 0:
                self.waiting_for_leader.add(tp)
                continue
            self.in_flight.add(key)
            remote.setdefault(view.leader, []).append(key)
        if local:
            results.update(write_txn_markers(broker, producer_id, producer_epoch, commit, coordinator_epoch, local))
        for leader, keys in remote.items():
            broker.task_group.create_task(self._send(leader, keys), name=f"pulllog-txn-markers-{leader}")
        return results

    def views_changed(self, partitions: Iterable[TopicPartition]) -> None:
        """The broker applied new views of ``partitions``: if one of them now has a leader and a
        marker waits for it, the coordinator writes its pending markers again (on the next
        turn of the loop, after the views are all in place)."""
        if not self.waiting_for_leader:
            return
        views = self.broker.partition_views
        ready = [tp for tp in partitions if tp in self.waiting_for_leader
                 and (view := views.get(tp)) is not None and view.leader >= 0]
        if ready:
            self.waiting_for_leader.difference_update(ready)
            asyncio.get_running_loop().call_soon(self._complete_pending)

    async def _send(self, leader: int, keys: list[MarkerKey]) -> None:
        producer_id, producer_epoch, commit, coordinator_epoch, _tp = keys[0]
        topics: dict[str, list[int]] = {}
        for *_rest, (topic, index) in keys:
            topics.setdefault(topic, []).append(index)
        marker = {"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                  "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                  "coordinator_epoch": coordinator_epoch}
        try:
            codes = await asyncio.wait_for(self._request(leader, {"markers": [marker]}), _REQUEST_TIMEOUT_S)
        except (OSError, EOFError, asyncio.IncompleteReadError, ValueError, TimeoutError) as exc:
            log.warning("markers of producer %d to broker %d failed: %s; retrying", producer_id, leader, exc)
            codes = {}
        for key in keys:
            self.in_flight.discard(key)
            code = codes.get(key[4])
            if code is not None and code not in _RETRIED:
                self.answers[key] = code
        if any(key not in self.answers for key in keys):
            await asyncio.sleep(_RETRY_BACKOFF_S)  # then again, to the leader of that moment
        self._complete_pending()

    def _complete_pending(self) -> None:
        transactions = self.broker._transactions
        if transactions is None:
            return
        try:
            transactions.complete_pending()
        except OSError as exc:
            log.error("completing transactions failed: %s", exc)

    async def _request(self, leader: int, data: dict[str, Any]) -> dict[TopicPartition, ErrorCode]:
        address = registered_address(self.broker.cluster_view, leader)
        if address is None:
            raise OSError(f"broker {leader} is not registered")
        reader, writer = await asyncio.open_connection(*address)
        try:
            self._correlation_id += 1
            response = await exchange(reader, writer, ApiKey.WRITE_TXN_MARKERS, _VERSION, data,
                                      correlation_id=self._correlation_id,
                                      client_id=f"pulllog-txn-markers-{self.broker.config.node_id}")
        finally:
            writer.close()
        return {(t.name, int(p.partition_index)): ErrorCode(p.error_code)
                for m in response.markers for t in m.topics for p in t.partitions}
