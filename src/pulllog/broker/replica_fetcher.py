"""A follower's fetcher: one task per source broker, fetching every partition this broker
follows there (Kafka's ReplicaFetcherThread, on the broker's event loop).

Its connection is a ``BrokerConnection`` (inter_broker.py: each answer read straight into one
buffer of its size, the fetcher woken once it is whole) on net/'s codec (Fetch v12 and
OffsetForLeaderEpoch v4 through kio); the broker never imports the client package. The next
Fetch goes out as soon as the previous answer is appended (Kafka's fetcher thread loops at
once too); the leader parks it in its fetch purgatory until there is new data (min bytes 1),
up to replica.fetch.wait.max.ms, and that Fetch's offset is how the leader learns the
follower's new log end, which moves the high watermark and completes acks=all Produces.

Per partition, in order:

1. *Truncation* (a partition just became a follower, or its fetch said its log does not
   continue the leader's): OffsetForLeaderEpoch with the follower's latest epoch; the leader
   answers (its largest epoch <= that one, where that epoch ended in its log). When the
   follower has that epoch too, it truncates to the smaller of the two ends and is done;
   when it does not, it truncates to its own end of the epoch it has below and asks again
   with its new latest epoch. No epoch on either side (UNDEFINED): it truncates to its high
   watermark, as Kafka does.
2. *Fetching*: Fetch with replica_id = this broker, from the log end offset, with the
   current leader epoch; the batches are appended as they are (``Log.append_as_follower``)
   and the high watermark becomes min(leader's, own log end). OFFSET_OUT_OF_RANGE below the
   leader's log start: the log starts again there; otherwise: truncate again.
   FENCED_LEADER_EPOCH (the leader is in a newer epoch), UNKNOWN_TOPIC_OR_PARTITION,
   KAFKA_STORAGE_ERROR: the partition rests for replica.fetch.backoff.ms, until the next view
   moves it. NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH from the broker this follower's
   view names leader in its epoch mostly mean that broker has not applied the same view yet
   (in a failover the follower's view often arrives first): the partition asks again after
   50 ms, doubling up to replica.fetch.backoff.ms while the answer stays the same. Kafka's
   follower rests replica.fetch.backoff.ms (1 s by default) there too, which a failover's
   first acks=all write then waits for.

A connection failure closes the connection and retries after replica.fetch.backoff.ms.

A partition added while a Fetch is parked at the leader (up to replica.fetch.wait.max.ms,
500 ms by default, when the partitions in it get no writes) does not wait for that Fetch to
come back: the fetcher drops the connection and starts again at once on a new one, with the
new partition. Answers on a connection come in order, so a second request would wait behind
the parked one. This is the failover path: the new leader's first acks=all write waits for
its followers' first Fetch of the partition, and their fetchers to that broker are usually
parked on partitions without writes (``__consumer_offsets``'). Nothing fetched is lost: the
dropped Fetch's partitions are asked again from the same offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..log.log import FollowerAppendError, OffsetOutOfRangeError
from ..net.apis import ApiKey
from ..net.errors import ProtocolError
from ..net.fetch import decode_fetch_response
from ..records import InvalidRecordError
from .inter_broker import BrokerConnection, Decoder

# The replica manager and its partitions, as this module sees them (it does not import
# replica_manager.py, which starts fetchers: one direction of import only).
Key = tuple[str, int]
PartitionReplica = Any
ReplicaManager = Any

__all__ = ["ReplicaFetcher"]

log = logging.getLogger(__name__)

_FETCH_VERSION = 12
_EPOCH_VERSION = 4
_FIRST_RETRY_S = 0.05
_LEADER_BEHIND = (ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch)
_RESTING = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
            ErrorCode.unknown_topic_or_partition, ErrorCode.kafka_storage_error)


@dataclass(slots=True)
class _Fetching:
    replica: PartitionReplica
    epoch: int  # the leader epoch the partition follows in
    truncating: bool = True
    resting_until: float = 0.0
    retries: int = 0  # answers in a row that said the leader has not taken up the view yet


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[Key, _Fetching] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: BrokerConnection | None = None
        self._correlation_id = 0
        self._in_flight = False  # a Fetch is out (parked at the leader, perhaps)
        self._restart = False  # add() dropped the connection under that Fetch: go again at once
        self._became_ready = 0  # partitions that became ready to fetch (added, or rested), so far
        self.fetches = 0  # answered Fetch requests (tests wait on it)
        self.restarts = 0  # Fetches dropped for a partition that became ready meanwhile

    def start(self, task_group: asyncio.TaskGroup) -> None:
        if self._task is None:
            self._task = task_group.create_task(self._run(), name=f"pulllog-replica-fetcher-{self.leader_id}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._close()

    def add(self, replica: PartitionReplica) -> None:
        self.partitions[replica.key] = _Fetching(replica, replica.leader_epoch)
        self._wake.set()
        self._drop_parked_fetch()

    def _drop_parked_fetch(self) -> None:
        """A partition became ready to fetch: not behind a parked Fetch (module docstring)."""
        self._became_ready += 1  # a Fetch being prepared without it is not sent (_fetch)
        if self._in_flight and not self._restart:
            self._restart = True
            self.restarts += 1
            self._close()

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        backoff = self.manager.broker.config.replica_fetch_backoff_ms / 1000
        while True:
            became_ready = self._became_ready
            now = time.monotonic()
            ready = [f for f in self.partitions.values() if f.resting_until <= now]
            if not ready:
                self._wake.clear()
                rest = min((f.resting_until for f in self.partitions.values()), default=None)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), None if rest is None else max(0.01, rest - now))
                continue
            try:
                truncating = [f for f in ready if f.truncating]
                if truncating:
                    await self._truncate(truncating)
                else:
                    await self._fetch(ready, became_ready)
            except (OSError, EOFError, ValueError, ProtocolError) as exc:
                self._close()
                if self._restart:  # add() dropped a parked Fetch: the new partition's turn, now
                    self._restart = False
                    continue
                log.warning("replica fetcher for broker %d: %s; retrying in %.1f s", self.leader_id, exc, backoff)
                await asyncio.sleep(backoff)

    async def _connect(self) -> BrokerConnection:
        if self._connection is None:
            address = self.manager.address_of(self.leader_id)
            if address is None:
                raise OSError(f"broker {self.leader_id} has no known address")
            self._connection = await BrokerConnection.open(*address)
        return self._connection

    async def _request(self, api: ApiKey, version: int, data: dict[str, Any], decode: Decoder | None = None) -> Any:
        await self._connect()
        assert self._connection is not None
        self._correlation_id += 1
        return await self._connection.exchange(api, version, data, correlation_id=self._correlation_id,
                                               client_id=f"pulllog-replica-fetcher-{self.manager.broker_id}",
                                               decode=decode)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _rest(self, fetching: _Fetching, code: ErrorCode) -> None:
        backoff = self.manager.broker.config.replica_fetch_backoff_ms / 1000
        replica = fetching.replica
        if code in _LEADER_BEHIND:  # module docstring: the leader is taking up the view, soon
            delay = min(backoff, _FIRST_RETRY_S * 2 ** fetching.retries)
            fetching.retries += 1
            asyncio.get_running_loop().call_later(delay, self._rested, fetching)
            log.info("%s-%d: leader %d answered %s; asking again in %.2f s", replica.topic, replica.index,
                     self.leader_id, code.name, delay)
        else:
            delay = backoff
            log.info("%s-%d: leader %d answered %s; waiting for a new view", replica.topic, replica.index,
                     self.leader_id, code.name)
        fetching.resting_until = time.monotonic() + delay

    def _rested(self, fetching: _Fetching) -> None:
        if self.partitions.get(fetching.replica.key) is fetching:
            self._wake.set()
            self._drop_parked_fetch()

    def _current(self, key: Key, fetching: _Fetching) -> bool:
        """The partition still follows here, in the epoch of the request."""
        return self.partitions.get(key) is fetching and fetching.replica.leader_epoch == fetching.epoch

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, truncating: list[_Fetching]) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for f in truncating:
            by_topic.setdefault(f.replica.topic, []).append(
                {"partition": f.replica.index, "current_leader_epoch": f.epoch,
                 "leader_epoch": f.replica.log.leader_epochs.latest_epoch})
        response = await self._request(ApiKey.OFFSET_FOR_LEADER_EPOCH, _EPOCH_VERSION, {
            "replica_id": self.manager.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        for topic in response.topics:
            for p in topic.partitions:
                key = (topic.topic, p.partition)
                fetching = self.partitions.get(key)
                if fetching is None or not self._current(key, fetching):
                    continue
                if p.error_code != ErrorCode.none:
                    self._rest(fetching, p.error_code)
                    continue
                fetching.truncating = not self._truncate_one(fetching, p.leader_epoch, p.end_offset)

    def _truncate_one(self, fetching: _Fetching, leader_epoch: int, leader_end: int) -> bool:
        """Truncate by the leader's answer; True once the follower's log agrees with it."""
        replica = fetching.replica
        partition_log = replica.log
        if leader_epoch < 0 or leader_end < 0 or partition_log.leader_epochs.latest_epoch < 0:
            target, done = partition_log.high_watermark, True
        else:
            own_epoch, own_end = partition_log.end_offset_for_epoch(leader_epoch)
            if own_epoch == leader_epoch:
                target, done = min(leader_end, own_end), True
            elif own_epoch < 0:
                target, done = partition_log.high_watermark, True
            else:
                target, done = own_end, False
        if target < partition_log.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (leader %d's epoch %d ends at %d)", replica.topic,
                     replica.index, partition_log.log_end_offset, target, self.leader_id, leader_epoch, leader_end)
            partition_log.truncate_to(target)
        return done

    # ------------------------------------------------------------------ fetching

    async def _fetch(self, ready: list[_Fetching], became_ready: int) -> None:
        cfg = self.manager.broker.config
        by_topic: dict[str, list[dict[str, int]]] = {}
        for f in ready:
            partition_log = f.replica.log
            by_topic.setdefault(f.replica.topic, []).append({
                "partition": f.replica.index, "current_leader_epoch": f.epoch,
                "fetch_offset": partition_log.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": partition_log.log_start_offset, "partition_max_bytes": cfg.replica_fetch_max_bytes})
        await self._connect()  # before the Fetch is out: add() drops only a sent one
        if self._became_ready != became_ready:  # one more is ready (while connecting): look again
            return
        self._restart = False
        self._in_flight = True
        try:
            response = await self._request(ApiKey.FETCH, _FETCH_VERSION, {
                "replica_id": self.manager.broker_id, "max_wait": cfg.replica_fetch_wait_max_ms, "min_bytes": 1,
                "max_bytes": max(cfg.replica_fetch_max_bytes, 10 * 1024 * 1024), "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                "forgotten_topics_data": [], "rack_id": ""}, decode_fetch_response)
        finally:
            self._in_flight = False
        self.fetches += 1
        if response.error_code != ErrorCode.none:
            raise OSError(f"Fetch answered {ErrorCode(response.error_code).name}")
        for topic in response.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                fetching = self.partitions.get(key)
                if fetching is not None and self._current(key, fetching):
                    self._fetched(fetching, p)

    def _fetched(self, fetching: _Fetching, p: Any) -> None:
        replica = fetching.replica
        partition_log = replica.log
        code = p.error_code
        if code == ErrorCode.offset_out_of_range:
            if partition_log.log_end_offset < p.log_start_offset:
                log.info("%s-%d: log end %d is below leader %d's log start %d: starting there", replica.topic,
                         replica.index, partition_log.log_end_offset, self.leader_id, p.log_start_offset)
                partition_log.truncate_fully_and_start_at(p.log_start_offset)
            else:
                fetching.truncating = True
            return
        if code != ErrorCode.none:
            self._rest(fetching, ErrorCode(code))
            return
        fetching.retries = 0
        records = p.records
        if records:
            try:
                partition_log.append_as_follower(records)
            except (FollowerAppendError, OffsetOutOfRangeError) as exc:
                log.warning("%s-%d: %s; truncating again", replica.topic, replica.index, exc)
                fetching.truncating = True
                return
            except InvalidRecordError as exc:  # a damaged batch from the leader: fetch it again later
                log.error("%s-%d: fetched batch refused: %s", replica.topic, replica.index, exc)
                fetching.resting_until = time.monotonic() + self.manager.broker.config.replica_fetch_backoff_ms / 1000
                return
            except OSError as exc:
                log.error("%s-%d: append as follower failed: %s", replica.topic, replica.index, exc)
                fetching.resting_until = time.monotonic() + self.manager.broker.config.replica_fetch_backoff_ms / 1000
                return
            if partition_log.flush_messages_due:
                self.manager.broker.defer_flush(partition_log)
        partition_log.update_high_watermark(min(p.high_watermark, partition_log.log_end_offset))
        # The leader's log start offset (retention, DeleteRecords) moves the follower's, up to
        # what the follower has committed (Kafka's follower does the same with its fetches).
        start = min(p.log_start_offset, partition_log.high_watermark)
        if start > partition_log.log_start_offset:
            try:
                partition_log.delete_records_before(start)
            except (OffsetOutOfRangeError, OSError) as exc:
                log.warning("%s-%d: cannot move the log start offset to %d: %s", replica.topic, replica.index,
                            start, exc)
