"""The replica manager: a cluster member's replicated partitions, as leader or follower.

Single-broker mode has none (``Broker.replicas`` is None): every partition is led by the one
broker, its high watermark is its log end offset, and nothing here runs or is imported.

The cluster layer tells the broker its roles (``apply(view)`` with a
:class:`~pulllog.cluster.state.PartitionView` for every partition whose replicas include
this broker; ``remove_topic(name)`` when a topic is deleted). A view whose leader epoch is
older than the one applied is ignored; one of the same epoch only updates the ISR.

Leader (the view names this broker):

* its log stamps the leader epoch on appends and starts the epoch at its log end offset
  (``Log.become_leader``);
* each follower's log end offset is the offset it fetches from (Fetch with its broker id as
  ``replica_id``); a follower is *caught up* when it fetched from the leader's log end (or
  from the end the leader had at its previous fetch: Kafka's lastCaughtUpTimeMs);
* high watermark = the minimum log end offset over the ISR (the leader's own included); it
  only goes up on a leader; when it moves, acks=all Produces (DelayedProduce in the produce
  purgatory, watched by partition) and consumers' long polls are woken;
* ISR shrink: housekeeping drops the in-sync followers not caught up for
  ``replica.lag.time.max.ms``; ISR expand: a follower that fetches at or past the high
  watermark (and past the start of the leader's epoch) joins. Both go through
  ``broker.alter_isr(new_state, topic, partition)`` (a conditional write of the state
  znode, leader epoch unchanged); None means the write lost a race: the next view decides.
  One change at a time per partition; the committed ISR is what counts meanwhile.
* acks=all: NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than the topic's
  ``min.insync.replicas``; after it, the Produce waits until the high watermark passes its
  last offset (NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the ISR is too small,
  NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after the request's timeout).

Follower: the partition joins the fetcher of its leader's broker (replica_fetcher.py), which
first truncates the log where its history and the leader's part (OffsetsForLeaderEpoch),
then fetches from the log end offset, appends the leader's batches as they are and takes
high watermark = min(leader's high watermark, own log end offset).

Clients: Produce, Fetch (consumers) and ListOffsets for a partition this broker does not
lead answer NOT_LEADER_OR_FOLLOWER; a request's current_leader_epoch older than the
leader's answers FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH. Consumers read up to
the high watermark (read_committed up to the LSO, which never passes it).

Persisted: every replicated log's high watermark in the data directory's
``replication-offset-checkpoint`` (Kafka's offset checkpoint format: version 0, count, "topic
partition offset" lines), every ``replica.high.watermark.checkpoint.interval.ms`` and at a
clean stop; a replica starts from it (never past its log end).

Only the partitions hosted here have local logs (``TopicManager.host_partition``); the
topic's others answer NOT_LEADER_OR_FOLLOWER.

Reassignment: a view whose replicas no longer include this broker stops the replica (no
more fetching, no more leading) and deletes its local copy (``TopicManager.drop_partition``,
as Kafka's StopReplica with delete); a copy found at start for a partition the broker is no
longer a replica of goes the same way (``drop_copy``). A leader drops a replica that left the
assignment from its followers even within one leader epoch (the controller's end of a
reassignment writes the state and the assignment together, but the watches may deliver the
state first): its fetches are refused, it never rejoins the ISR, and were it in the ISR the
next shrink takes it out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..log import Log
from ..log.checkpoint import CheckpointError, read_offsets, write_offsets
from ..purgatory.delayed import DelayedOperation, DelayedOperationPurgatory
from .inter_broker import registered_address
from .topics import PartitionError

if TYPE_CHECKING:
    from ..cluster.state import LeaderAndIsr, PartitionView
    from .replica_fetcher import ReplicaFetcher

__all__ = ["REPLICATION_OFFSET_CHECKPOINT_FILE", "DelayedProduce", "PartitionReplica", "ReplicaManager"]

REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"

log = logging.getLogger(__name__)

Key = tuple[str, int]
AlterIsr = Callable[["LeaderAndIsr", str, int], Awaitable["LeaderAndIsr | None"]]


def _flush_leader_epochs(logs: list[Log]) -> None:
    """In a worker thread: write the logs' leader-epoch checkpoints. A failed one stays
    pending (the log's close tries again); a deleted partition's has nowhere to go."""
    for partition_log in logs:
        try:
            partition_log.flush_leader_epochs()
        except OSError as exc:
            if partition_log.directory.exists():
                log.error("%s: cannot write the leader-epoch checkpoint: %s", partition_log.directory.name, exc)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica state)."""

    log_end_offset: int = -1  # unknown until its first fetch in this epoch
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = -1


class PartitionReplica:
    """One partition this broker is a replica of: its log and its role."""

    def __init__(self, topic: str, index: int, partition_log: Log, state: "LeaderAndIsr",
                 replicas: tuple[int, ...]) -> None:
        self.topic = topic
        self.index = index
        self.log = partition_log
        self.state = state
        self.replicas = replicas
        self.is_leader = False
        self.followers: dict[int, FollowerState] = {}
        self.epoch_start_offset = 0  # the leader's log end when it took this epoch
        self.isr_change_pending = False

    @property
    def key(self) -> Key:
        return (self.topic, self.index)

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.state.leader}"
        return f"PartitionReplica({self.topic}-{self.index}, {role}, epoch {self.leader_epoch}, isr {self.isr})"


def _error(code: ErrorCode, message: str) -> PartitionError:
    return PartitionError(code, message)


class DelayedProduce(DelayedOperation):
    """An acks=all Produce waiting until every partition's high watermark passes its records.

    ``result`` (a future) gets partition -> error code once every partition is decided, or
    at the request's timeout (the undecided ones: REQUEST_TIMED_OUT)."""

    def __init__(self, timeout_ms: int, manager: "ReplicaManager",
                 pending: list[tuple[PartitionReplica, int]]) -> None:
        super().__init__(max(1, timeout_ms))
        self.manager = manager
        self.pending = pending
        self.codes: dict[Key, ErrorCode] = {}
        self.result: asyncio.Future[dict[Key, ErrorCode]] = asyncio.get_running_loop().create_future()

    def try_complete(self) -> bool:
        for replica, required in self.pending:
            if replica.key not in self.codes:
                code = self.manager.acks_all_status(replica, required)
                if code is not None:
                    self.codes[replica.key] = code
        if len(self.codes) == len(self.pending):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for replica, _required in self.pending:
            self.codes.setdefault(replica.key, ErrorCode.request_timed_out)
        if not self.result.done():
            self.result.set_result(self.codes)

    def cancel(self) -> None:
        super().cancel()
        if not self.result.done():  # the broker is stopping: the client retries elsewhere
            self.result.set_result({r.key: ErrorCode.request_timed_out for r, _ in self.pending})


class ReplicaManager:
    """A cluster member's replicated partitions (module docstring)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.broker_id: int = broker.config.node_id
        self.partitions: dict[Key, PartitionReplica] = {}
        self.replicated_topics: set[str] = set()
        self.produce_purgatory: DelayedOperationPurgatory[Key, DelayedProduce] = DelayedOperationPurgatory("Produce")
        self.fetchers: dict[int, "ReplicaFetcher"] = {}
        # broker id -> (host, port) of its listener: the cluster view's registrations by default
        self.address_of: Callable[[int], tuple[str, int] | None] = self._registered_address
        self._checkpointed: dict[Key, int] | None = None  # replication-offset-checkpoint, read on first use
        self._task_group: asyncio.TaskGroup | None = None
        self._last_hw_checkpoint = _now_ms()
        self._stopped = False
        self._fetching_stopped = False  # a controlled shutdown is under way (stop_fetching)
        self._checkpoint_lock = threading.Lock()  # the housekeeping's worker thread and a clean stop
        # Logs whose new leader epoch is only in memory: written together, off the loop, once
        # the views that arrived together are applied (``_write_leader_epochs``).
        self._epochs_to_write: dict[Key, Log] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self, task_group: asyncio.TaskGroup) -> None:
        """Run in the broker's task group: the produce purgatory's driver and the fetchers."""
        self._task_group = task_group
        task_group.create_task(self.produce_purgatory.run(), name="pulllog-purgatory-produce")
        for fetcher in self.fetchers.values():
            fetcher.start(task_group)

    def shutdown(self) -> None:
        """Stop fetching and answer every waiting acks=all Produce (the broker is stopping)."""
        self._stopped = True
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.produce_purgatory.shutdown()

    def stop_fetching(self) -> None:
        """A controlled shutdown begins: fetch no more as a follower, now or after a view makes
        this broker one, so no leader adds it back to an ISR (the controller takes it out);
        leading goes on until the views move the leadership."""
        self._fetching_stopped = True
        for fetcher in self.fetchers.values():
            fetcher.stop()

    def close(self) -> None:
        """At a clean stop, before the logs close: checkpoint the high watermarks."""
        try:
            self.write_hw_checkpoint()
        except OSError as exc:
            log.error("cannot write %s: %s", REPLICATION_OFFSET_CHECKPOINT_FILE, exc)

    @property
    def checkpoint_path(self) -> Any:
        return self.broker.config.data_dir / REPLICATION_OFFSET_CHECKPOINT_FILE

    def _checkpointed_hw(self, key: Key) -> int:
        if self._checkpointed is None:
            try:
                self._checkpointed = read_offsets(self.checkpoint_path)
            except (OSError, CheckpointError) as exc:
                log.warning("%s: ignored (%s); replicas start from high watermark 0", self.checkpoint_path, exc)
                self._checkpointed = {}
        return self._checkpointed.get(key, 0)

    def high_watermarks(self) -> dict[Key, int]:
        return {key: r.log.high_watermark for key, r in self.partitions.items() if not r.log.closed}

    def write_hw_checkpoint(self, points: dict[Key, int] | None = None) -> None:
        points = self.high_watermarks() if points is None else points
        with self._checkpoint_lock:
            write_offsets(self.checkpoint_path, points)

    async def housekeeping(self) -> None:
        """Called by the broker's housekeeping (at most every second): ISR shrink, and the
        high-watermark checkpoint every replica.high.watermark.checkpoint.interval.ms."""
        now = _now_ms()
        cfg = self.broker.config
        self.maybe_shrink_isr(now)
        if now - self._last_hw_checkpoint >= cfg.replica_high_watermark_checkpoint_interval_ms:
            self._last_hw_checkpoint = now
            points = self.high_watermarks()
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.write_hw_checkpoint, points)
            except OSError as exc:  # retried next interval; a restart then starts from an older HW
                log.error("cannot write %s: %s", REPLICATION_OFFSET_CHECKPOINT_FILE, exc)

    # ------------------------------------------------------------------ the seam: views in

    def apply(self, view: "PartitionView") -> None:
        """Become what ``view`` says this broker is for the partition (module docstring)."""
        key = (view.topic, view.partition)
        current = self.partitions.get(key)
        if self.broker_id not in view.replicas:
            if current is not None:
                self._stop_replica(current)
            self.drop_copy(view.topic, view.partition)
            return
        self.replicated_topics.add(view.topic)
        partition_log = current.log if current is not None else self._ensure_log(view)
        state = view.state
        if state is None:
            return  # no leader decided yet
        if current is not None and (state.leader_epoch < current.leader_epoch or (
                state.leader_epoch == current.leader_epoch and 0 <= state.zk_version < current.state.zk_version)):
            log.debug("%s-%d: ignoring a view of epoch %d, version %d (applied: %d, %d)", view.topic,
                      view.partition, state.leader_epoch, state.zk_version, current.leader_epoch,
                      current.state.zk_version)
            return
        if current is None:
            current = PartitionReplica(view.topic, view.partition, partition_log, state, view.replicas)
            self.partitions[key] = current
            if not partition_log.replicated:
                partition_log.start_replication(self._checkpointed_hw(key))
            changed = True
        else:
            changed = state.leader_epoch != current.leader_epoch or state.leader != current.state.leader
        current.replicas = view.replicas
        if state.leader == self.broker_id:
            if changed or not current.is_leader:
                self._become_leader(current, state)
            else:
                current.state = state  # an ISR change (ours, or the controller's)
                for replica_id in view.replicas:
                    if replica_id != self.broker_id:
                        current.followers.setdefault(replica_id, FollowerState(last_caught_up_ms=_now_ms()))
                for gone in [r for r in current.followers if r not in view.replicas]:
                    del current.followers[gone]  # reassigned away: its fetches are refused from now on
                self._maybe_increment_hw(current)
                self.produce_purgatory.check_and_complete(key)
        elif changed or current.is_leader:
            self._become_follower(current, state)
        else:
            current.state = state

    def drop_copy(self, topic: str, index: int) -> None:
        """This broker is not (or no longer) a replica of the partition: its local copy goes,
        so it neither serves nor keeps it (a reassignment moved it away, perhaps while this
        broker was down). Fetches parked on it are answered first."""
        if not self._holds(topic, index):
            return
        self.broker.fetch_purgatory.check_and_complete((topic, index))
        try:
            self.broker.topics.drop_partition(topic, index)
        except OSError as exc:  # the copy stays (not served: not a replica); the next view tries again
            log.error("%s-%d: cannot delete this broker's copy: %s", topic, index, exc)

    def _holds(self, topic: str, index: int) -> bool:
        """A copy of the partition in a cluster member's local copy of the topic (a topic of a
        single broker's, not hosted_only, is never dropped here)."""
        found = self.broker.topics.find(topic)
        return found is not None and found.hosted_only and index in found.partitions

    def remove_topic(self, name: str) -> None:
        """The topic was deleted cluster-wide: stop replicating it and delete the local copy."""
        for key in [k for k in self.partitions if k[0] == name]:
            self._stop_replica(self.partitions[key])
        self.replicated_topics.discard(name)
        if self.broker.topics.find(name) is not None:
            self.broker.delete_topic(name)

    def _ensure_log(self, view: "PartitionView") -> Log:
        # Only this partition's log: the broker holds no copy of the topic's others.
        partition_log = self.broker.topics.host_partition(view.topic, view.partition, dict(view.configs),
                                                          topic_id=view.topic_id)
        if isinstance(partition_log, PartitionError):
            raise OSError(f"partition {view.topic}-{view.partition} cannot be opened: {partition_log.message}")
        return partition_log

    def _become_leader(self, replica: PartitionReplica, state: "LeaderAndIsr") -> None:
        self._unfollow(replica)
        replica.state = state
        replica.is_leader = True
        # The partition leads once its epoch is in memory; the checkpoint's fsync would take
        # the loop for each of the ~50 partitions a failover moves (leader_epoch.py).
        replica.log.become_leader(state.leader_epoch, flush=False)
        self._write_leader_epoch_later(replica.key, replica.log)
        replica.epoch_start_offset = replica.log.log_end_offset
        now = _now_ms()
        replica.followers = {r: FollowerState(last_caught_up_ms=now) for r in replica.replicas if r != self.broker_id}
        log.info("%s-%d: leader in epoch %d, ISR %s, log end %d", replica.topic, replica.index,
                 state.leader_epoch, list(state.isr), replica.log.log_end_offset)
        self._maybe_increment_hw(replica)
        self._wake(replica.key)

    def _write_leader_epoch_later(self, key: Key, partition_log: Log) -> None:
        """Queue the log's leader-epoch checkpoint for the worker thread; the first of a batch
        of views schedules one write of them all after the loop's current callbacks."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop (a test driving the manager directly): write now
            partition_log.flush_leader_epochs()
            return
        if not self._epochs_to_write:
            loop.call_soon(self._write_leader_epochs, loop)
        self._epochs_to_write[key] = partition_log

    def _write_leader_epochs(self, loop: asyncio.AbstractEventLoop) -> None:
        logs, self._epochs_to_write = list(self._epochs_to_write.values()), {}
        loop.run_in_executor(None, _flush_leader_epochs, logs)

    def _become_follower(self, replica: PartitionReplica, state: "LeaderAndIsr") -> None:
        self._unfollow(replica)
        replica.state = state
        replica.is_leader = False
        replica.followers = {}
        replica.log.become_follower()
        log.info("%s-%d: follower of %d in epoch %d", replica.topic, replica.index, state.leader, state.leader_epoch)
        self._wake(replica.key)  # waiting acks=all Produces answer NOT_LEADER_OR_FOLLOWER
        if state.leader >= 0 and not self._stopped and not self._fetching_stopped:
            self._fetcher(state.leader).add(replica)

    def _stop_replica(self, replica: PartitionReplica) -> None:
        self._unfollow(replica)
        replica.is_leader = False
        replica.followers = {}
        replica.log.become_follower()
        del self.partitions[replica.key]
        self._wake(replica.key)

    def _unfollow(self, replica: PartitionReplica) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(replica.key)

    def _fetcher(self, leader_id: int) -> "ReplicaFetcher":
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            from .replica_fetcher import ReplicaFetcher

            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            if self._task_group is not None:
                fetcher.start(self._task_group)
        return fetcher

    def _registered_address(self, broker_id: int) -> tuple[str, int] | None:
        return registered_address(self.broker.cluster_view, broker_id)

    def _wake(self, key: Key) -> None:
        self.produce_purgatory.check_and_complete(key)
        self.broker.fetch_purgatory.check_and_complete(key)

    # ------------------------------------------------------------------ handlers' questions

    def leader_log(self, topic: str, index: int, current_leader_epoch: int = -1) -> Log | PartitionError:
        """The log of a partition this broker leads, or Kafka's error for a client's request."""
        replica = self.partitions.get((topic, index))
        if replica is None:
            if topic in self.replicated_topics or (topic, index) in self.broker.partition_views:
                return _error(ErrorCode.not_leader_or_follower, f"broker {self.broker_id} does not lead {topic}-{index}")
            return self.broker.topics.partition_log(topic, index)  # a topic of this broker's own
        if not replica.is_leader:
            return _error(ErrorCode.not_leader_or_follower,
                          f"broker {self.broker_id} is not the leader of {topic}-{index} (broker {replica.state.leader} is)")
        if current_leader_epoch >= 0 and current_leader_epoch != replica.leader_epoch:
            if current_leader_epoch < replica.leader_epoch:
                return _error(ErrorCode.fenced_leader_epoch,
                              f"leader epoch {current_leader_epoch} of {topic}-{index} is old (now {replica.leader_epoch})")
            return _error(ErrorCode.unknown_leader_epoch,
                          f"leader epoch {current_leader_epoch} of {topic}-{index} is not known here yet")
        return replica.log

    def leader_epoch_of(self, topic: str, index: int) -> int:
        replica = self.partitions.get((topic, index))
        return replica.leader_epoch if replica is not None else 0

    def produce_log(self, topic: str, index: int, acks: int) -> Log | PartitionError:
        """``leader_log`` for Produce, plus acks=all's check of min.insync.replicas."""
        found = self.leader_log(topic, index)
        if acks == -1 and not isinstance(found, PartitionError):
            replica = self.partitions.get((topic, index))
            if replica is not None and len(replica.isr) < found.config.min_insync_replicas:
                return _error(ErrorCode.not_enough_replicas,
                              f"{topic}-{index} has {len(replica.isr)} in-sync replica(s) {list(replica.isr)}, "
                              f"fewer than min.insync.replicas={found.config.min_insync_replicas}")
        return found

    def follower_fetch(self, topic: str, index: int, replica_id: int, fetch_offset: int,
                       current_leader_epoch: int) -> Log | PartitionError:
        """A follower's Fetch: the leader's log, after noting the follower's position."""
        found = self.leader_log(topic, index, current_leader_epoch)
        if isinstance(found, PartitionError):
            return found
        replica = self.partitions.get((topic, index))
        if replica is None:
            return _error(ErrorCode.not_leader_or_follower, f"{topic}-{index} is not replicated")
        follower = replica.followers.get(replica_id)
        if follower is None:
            return _error(ErrorCode.not_leader_or_follower,
                          f"broker {replica_id} is not a replica of {topic}-{index} ({list(replica.replicas)})")
        self._update_follower(replica, replica_id, follower, fetch_offset, _now_ms())
        return found

    def after_leader_append(self, topic: str, index: int) -> None:
        """A Produce (or the broker itself) appended as leader: with no follower in the ISR the
        high watermark moves now."""
        replica = self.partitions.get((topic, index))
        if replica is not None and replica.is_leader:
            self._maybe_increment_hw(replica)

    def acks_all_status(self, replica: PartitionReplica, required_offset: int) -> ErrorCode | None:
        """A waiting acks=all Produce's answer for one partition, or None while it waits."""
        if self.partitions.get(replica.key) is not replica or not replica.is_leader:
            return ErrorCode.not_leader_or_follower
        if replica.log.high_watermark >= required_offset:
            if len(replica.isr) < replica.log.config.min_insync_replicas:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        return None

    def wait_for_acks(self, timeout_ms: int, pending: list[tuple[str, int, int]]) -> DelayedProduce:
        """Park an acks=all Produce: (topic, partition, last offset + 1) of each partition appended."""
        watched = [(self.partitions[(t, i)], required) for t, i, required in pending if (t, i) in self.partitions]
        op = DelayedProduce(timeout_ms, self, watched)
        self.produce_purgatory.try_complete_else_watch(op, [r.key for r, _ in watched])
        return op

    # ------------------------------------------------------------------ leader's bookkeeping

    def _update_follower(self, replica: PartitionReplica, replica_id: int, follower: FollowerState,
                         fetch_offset: int, now: int) -> None:
        leader_end = replica.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.leader_end_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.leader_end_at_last_fetch = leader_end
        follower.last_fetch_ms = now
        if (replica_id not in replica.isr and not replica.isr_change_pending and replica_id in replica.replicas
                and fetch_offset >= replica.log.high_watermark and fetch_offset >= replica.epoch_start_offset):
            self._change_isr(replica, replica.isr + (replica_id,))
        self._maybe_increment_hw(replica)

    def _maybe_increment_hw(self, replica: PartitionReplica) -> None:
        partition_log = replica.log
        new_hw = partition_log.log_end_offset
        for replica_id in replica.isr:
            # A replica reassigned away may linger in the ISR until the next shrink; no
            # election can pick it (they pick from the assignment), so it holds nothing back.
            if replica_id != self.broker_id and replica_id in replica.replicas:
                follower = replica.followers.get(replica_id)
                new_hw = min(new_hw, follower.log_end_offset if follower is not None else -1)
        if new_hw > partition_log.high_watermark and partition_log.update_high_watermark(new_hw):
            self._wake(replica.key)

    def maybe_shrink_isr(self, now: int) -> None:
        """Drop from each led partition's ISR the followers not caught up for replica.lag.time.max.ms."""
        lag = self.broker.config.replica_lag_time_max_ms
        for replica in list(self.partitions.values()):
            if not replica.is_leader or replica.isr_change_pending:
                continue
            out = [r for r in replica.isr if r != self.broker_id
                   and now - replica.followers.get(r, FollowerState()).last_caught_up_ms > lag]
            if out:
                log.info("%s-%d: followers %s have not caught up for %d ms: shrinking the ISR",
                         replica.topic, replica.index, out, lag)
                self._change_isr(replica, tuple(r for r in replica.isr if r not in out))

    def _change_isr(self, replica: PartitionReplica, isr: tuple[int, ...]) -> None:
        if self._task_group is None or self._stopped:
            return
        replica.isr_change_pending = True
        self._task_group.create_task(self._alter_isr(replica, isr), name="pulllog-alter-isr")

    async def _alter_isr(self, replica: PartitionReplica, isr: tuple[int, ...]) -> None:
        proposed = replica.state.with_isr(isr)
        try:
            result = await self.broker.alter_isr(proposed, replica.topic, replica.index)
        except Exception as exc:  # noqa: BLE001 (ZooKeeper away, any kazoo error: the next check tries again)
            log.warning("%s-%d: ISR change to %s failed: %s", replica.topic, replica.index, list(isr), exc)
            result = None
        finally:
            replica.isr_change_pending = False
        if result is None or self.partitions.get(replica.key) is not replica or not replica.is_leader:
            return
        if result.leader_epoch != replica.leader_epoch:
            return  # a newer decision: its view comes
        log.info("%s-%d: ISR now %s", replica.topic, replica.index, list(result.isr))
        replica.state = result
        self._maybe_increment_hw(replica)
        self.produce_purgatory.check_and_complete(replica.key)

    # ------------------------------------------------------------------ OffsetsForLeaderEpoch

    def end_offset_for_epoch(self, topic: str, index: int, current_leader_epoch: int,
                             leader_epoch: int) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset) as OffsetsForLeaderEpoch answers (served by the leader)."""
        found = self.leader_log(topic, index, current_leader_epoch)
        if isinstance(found, PartitionError):
            return found.code, -1, -1
        if not found.replicated:  # a topic of this broker's own: one epoch (0) since the start
            return (ErrorCode.none, 0, found.log_end_offset) if leader_epoch == 0 else (ErrorCode.none, -1, -1)
        epoch, end = found.end_offset_for_epoch(leader_epoch)
        return ErrorCode.none, epoch, end

    def describe(self) -> list[PartitionReplica]:
        return list(self.partitions.values())

    def keys(self) -> Iterable[Key]:
        return self.partitions.keys()
