"""The broker: topics on disk, the Kafka wire protocol on a socket, and the purgatory.

As a library::

    async with Broker(data_dir=tmp_path, port=0) as broker:
        ...  # clients connect to broker.bootstrap_servers

As a service: ``pulllog serve`` runs :meth:`Broker.serve` until SIGINT / SIGTERM.

Lifecycle (structured: one ``asyncio.TaskGroup`` owns every task the broker starts, and
leaving ``async with Broker()`` joins them all):

1. lock the data directory (``.lock``: a second broker on it is refused before it reads
   anything), then load topics, running log recovery where a partition was not shut down
   cleanly; a topic that cannot be opened stops the start (see broker/topics.py); then
   replay ``__consumer_offsets`` and, when it exists, ``__transaction_state`` (the
   transaction coordinator writes the markers a crash left unwritten, see txn/coordinator.py);
   bind the listening sockets; a cluster member (``zookeeper.connect``) then registers in
   ZooKeeper and runs for controller (see pulllog/cluster/membership.py), refusing to start
   when its broker.id is taken;
2. listen, enter the task group and start in it the purgatory drivers, the housekeeping
   loop (flush.ms, retention, offsets and producer id expiry, transaction timeouts) and the
   shutdown task, and start the log cleaner's thread
   (compaction in its worker process, see log/cleaner.py); each accepted connection's
   task joins the same group;
3. on :meth:`Broker.stop` (or a clean exit from the block): a cluster member first hands its
   leaderships over (controlled shutdown, see broker/controlled_shutdown.py); stop accepting, cancel long
   polls, let each connection finish the request in hand (up to 5 s, then cancel it), stop
   housekeeping; a cluster member then closes its ZooKeeper session (its registration goes);
4. after an error or a cancellation instead: cancel every task at once;
5. either way, once every task is joined: stop the cleaner thread and join its worker
   process, then flush every log and write its clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..log.cleaner import LogCleaner, run_on_loop
from ..log import Log
from ..log.handles import HANDLES
from ..log.log import wall_clock_ms
from ..net.apis import ApiKey
from ..net.protocol import RequestDecoder
from .config import BrokerConfig
from .flusher import FlushResult, LogFlusher
from .handlers import HandlerTable
from .limits import open_files_budget
from .listener import Listener, listen_sockets
from .lock import DataDirLock
from ..purgatory.delayed import DelayedOperationPurgatory
from .server import Connection
from .topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, Topic, TopicManager

if TYPE_CHECKING:
    from ..cluster.membership import ClusterMembership
    from .producer_ids import ClusterProducerIds
    from ..cluster.state import LeaderAndIsr, PartitionView
    from .replica_manager import ReplicaManager
    from ..cluster.znodes import ClusterView
    from ..group.coordinator import GroupCoordinator
    from .faults import Faults
    from .txn_marker_sender import TxnMarkerSender

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

    from ..txn.coordinator import TransactionCoordinator

__all__ = ["Broker"]

log = logging.getLogger("pulllog.broker")

_SHUTDOWN_GRACE_S = 5.0
# How long a coordinator's append waits for the ISR: Kafka's offsets.commit.timeout.ms for
# __consumer_offsets; request.timeout.ms (30 s) for transaction state and markers.
_COORDINATOR_ACKS_TIMEOUT_MS = {OFFSETS_TOPIC: 5_000}
_UNDAMAGED_LINES = 20


def _log_flush_error(name: str, outcome: "asyncio.Future[FlushResult] | OSError") -> None:
    error = outcome if isinstance(outcome, OSError) else None if outcome.cancelled() else outcome.result()
    if error is not None:
        log.error("flush of %s failed: %s", name, error)


class Broker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        config: BrokerConfig | None = None,
        properties: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> None:
        cfg = config or BrokerConfig.load(properties)
        changes: dict[str, Any] = dict(overrides)
        if data_dir is not None:
            changes["data_dir"] = Path(data_dir)
        if host is not None:
            changes["host"] = host
        if port is not None:
            changes["port"] = port
        self.config: BrokerConfig = replace(cfg, **changes) if changes else cfg
        self.topics = TopicManager(self.config.data_dir, self.config.log_defaults, node_id=self.config.node_id,
                                   max_partitions=self.config.max_broker_partitions)
        self.data_dir_lock = DataDirLock(self.config.data_dir)
        self.fetch_purgatory: DelayedOperationPurgatory[Any, Any] = DelayedOperationPurgatory("Fetch")
        self.group_purgatory: DelayedOperationPurgatory[Any, Any] = DelayedOperationPurgatory("Rebalance")
        self._groups: GroupCoordinator | None = None  # built on first use, see groups
        # Handlers see the broker through pulllog.broker.api.BrokerApi. These two are bound
        # once, not wrapped: Produce and Fetch call them per partition / per long poll.
        self.partition = self.topics.partition_log
        self.wait_for_fetch = self.fetch_purgatory.wait
        self.handlers = HandlerTable()  # a handler's module is imported with its API's first request
        self.supported_apis = self.handlers.supported
        if self.config.zookeeper_connect is None:  # ControlledShutdown is a cluster member's, to its controller
            self.supported_apis = {k: v for k, v in self.supported_apis.items() if k != ApiKey.CONTROLLED_SHUTDOWN}
        self.decoder = RequestDecoder(self.supported_apis)
        # injected failures and delays, for tests (none by default; built on first use)
        self.faults: Faults = _FaultsOnFirstUse(self)  # type: ignore[assignment]
        self.connections: set[Connection] = set()
        self.accepting = False
        self.port = self.config.port
        self.recovery_report: list[str] = []
        # sendfile for Fetch; off only to measure what zero copy saves (scripts/bench_fetch.py)
        self.zero_copy = True
        self.internal_errors = 0  # handler failures (bugs): each closed one connection
        self._listeners: list[Listener] = []
        self._stop = asyncio.Event()
        self._next_producer_id = (time.time_ns() // 1_000_000) << 8
        # A cluster member's ids come from blocks claimed in ZooKeeper (unique across brokers);
        # a single broker's count up from the clock as above.
        self._cluster_producer_ids: "ClusterProducerIds | None" = None
        self._task_group: asyncio.TaskGroup | None = None
        self._tasks: list[asyncio.Task[None]] = []  # the broker's own (not the connections')
        self._cleaned_up = False
        self.cleaner: LogCleaner | None = None  # its thread runs while serve() does
        self._transactions: "TransactionCoordinator | None" = None  # see the transactions property
        self.marker_sender: "TxnMarkerSender | None" = None  # a cluster member's, made with the coordinator
        # fsyncs off the loop, one under way per log (flush.messages, flush.ms, rolls)
        self.flusher = LogFlusher(lambda run: self.task_group.create_task(run, name="pulllog-flush"))
        # A cluster member's ZooKeeper session (None for a single broker: nothing of
        # pulllog.cluster is imported), and the latest view of the cluster it gave, set on the loop.
        self.membership: "ClusterMembership | None" = None
        self.cluster_view: "ClusterView | None" = None
        # A cluster member's view of every partition in the cluster (from ZooKeeper's watches,
        # updated on the loop), for Metadata; and the partitions this broker was last told it
        # holds a replica of (so a view that drops it still reaches the replica manager).
        self.partition_views: "dict[tuple[str, int], PartitionView]" = {}
        self._replica_of: set[tuple[str, int]] = set()
        self._view_waiters: list[asyncio.Future[None]] = []
        # flush.messages fsyncs of the coordinators' and markers' appends, for their request (collect_flushes)
        self._flush_collector: list[tuple[Log, asyncio.Future[FlushResult]]] | None = None
        # A cluster member's replicated partitions (broker/replica_manager.py). None for a single
        # broker: it leads every partition, with the high watermark at the log end offset.
        self.replicas: "ReplicaManager | None" = None
        # A cluster member's coordinator partitions: (internal topic, partition) -> the leader
        # epoch this broker loaded it in (see _sync_coordinators). A single broker leaves it
        # empty: it coordinates everything (the coordinators get no owner check).
        self.coordinating: dict[tuple[str, int], int] = {}
        # Those of them still loading (a task each): their groups / transactional ids answer
        # COORDINATOR_LOAD_IN_PROGRESS until it ends, as Kafka's do while it loads a partition.
        self.loading: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.coordinator_load_hook: "Callable[[tuple[str, int]], Awaitable[None]] | None" = None
        """Awaited before a coordinator partition's load starts (None: no wait). A test sets it
        to hold a load back and watch the partition answer COORDINATOR_LOAD_IN_PROGRESS."""
        if self.config.zookeeper_connect is not None:
            self.enable_replication()

    def enable_replication(self) -> "ReplicaManager":
        """Make this broker a replica manager's (cluster mode does at construction; a test's
        own controller may too, then drives ``replicas.apply`` and ``alter_isr`` itself)."""
        if self.replicas is None:
            from .replica_manager import ReplicaManager

            self.replicas = ReplicaManager(self)
            if self._task_group is not None:
                self.replicas.start(self._task_group)
        return self.replicas


    # ------------------------------------------------------------------ addresses

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.config.advertised_host or self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.config.advertised_port or self.port

    @property
    def bootstrap_servers(self) -> str:
        host, port = self.advertised
        return f"{host}:{port}"

    @property
    def groups(self) -> "GroupCoordinator":
        """The group coordinator, built when first needed: at start when the data directory
        holds ``__consumer_offsets`` (its groups are loaded before the broker listens), else on
        the first group request. Until then there is no group state to keep, and importing
        the coordinator (its request and result dataclasses) is a large part of a fresh start."""
        if self._groups is None:
            from ..group.coordinator import GroupCoordinator

            self._groups = GroupCoordinator(
                self.topics, self.group_purgatory,
                offsets_partitions=self.config.offsets_topic_num_partitions,
                initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
                offsets_retention_ms=self.config.offsets_retention_ms,
                flush_due=self.defer_flush,
                owner=self._owner(OFFSETS_TOPIC) if self.clustered else None,
                appended=self._coordinator_appended if self.clustered else None,
                durably=self._durably if self.clustered else None,
            )
        return self._groups

    @property
    def clustered(self) -> bool:
        """A cluster member (``zookeeper.connect``): the coordinators own only the partitions
        of their internal topics this broker leads."""
        return self.config.zookeeper_connect is not None

    def _owner(self, topic: str) -> "Callable[[int], ErrorCode]":
        from kio.schema.errors import ErrorCode

        def owner(index: int) -> ErrorCode:
            key = (topic, index)
            if key not in self.coordinating:
                return ErrorCode.not_coordinator
            return ErrorCode.coordinator_load_in_progress if key in self.loading else ErrorCode.none

        return owner

    # ------------------------------------------------------------------ running

    async def __aenter__(self) -> "Broker":
        """Load the logs, listen, and start the broker's tasks; returns once clients can connect."""
        await self._start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Shut down and join every task: gracefully after a clean exit, at once after an error.

        The block's own error propagates as it is (not wrapped in an exception group); a task of
        the broker's that failed is raised in an exception group, as a task group does.
        """
        if exc is None:
            self.stop()  # the shutdown task runs the graceful sequence, then every task returns
        else:
            self._cancel_tasks()
        try:
            assert self._task_group is not None
            # A cancellation goes to the task group, which keeps asyncio's cancel/uncancel
            # accounting right; any other error of the block stays the block's.
            cancelled = isinstance(exc, asyncio.CancelledError)
            await self._task_group.__aexit__(exc_type if cancelled else None, exc if cancelled else None,
                                             tb if cancelled else None)
        finally:
            self._final_cleanup()

    async def serve(self, *, ready: "asyncio.Future[Broker] | None" = None) -> None:
        """Run until :meth:`stop` (or cancellation), then shut down cleanly.

        ``ready`` gets this broker once it listens, or the error that kept it from listening
        (which ``serve`` raises too). In a task group::

            ready = asyncio.get_running_loop().create_future()
            tg.create_task(broker.serve(ready=ready))
            broker = await ready
        """
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(self)
            except BaseException as exc:
                _report_failure(ready, exc)
                raise
            if ready is not None and not ready.done():
                ready.set_result(self)
            await self._stop.wait()

    def stop(self) -> None:
        """Begin a clean shutdown (safe to call more than once, and before the broker started).

        :meth:`serve` returns once it is done; in ``async with Broker()`` the block's end waits
        for it.
        """
        self._stop.set()

    @property
    def task_group(self) -> asyncio.TaskGroup:
        """The task group that owns every task of the running broker (connections included)."""
        if self._task_group is None:
            raise RuntimeError("the broker is not running; use `async with Broker(...)` or `await broker.serve()`")
        return self._task_group

    async def _start(self) -> None:
        if self._task_group is not None:
            raise RuntimeError("this broker already ran; create a new Broker to start another")
        budget = open_files_budget(self.config.max_open_files)
        HANDLES.resize(budget.max_open_files)
        log.info("%s", budget.describe())
        # Before anything under the data directory is read or written: a second broker on a
        # live directory must not run recovery on logs the first one is appending to.
        self.data_dir_lock.acquire()
        try:
            self.recovery_report = self.topics.load(offline_ok=self.config.start_with_offline_partitions)
            self._log_recovery_report()
            # A cluster member loads a coordinator partition when it becomes its leader
            # (_sync_coordinators), not everything it has a copy of.
            loaded = self.groups.load() if (self.topics.partition_logs(OFFSETS_TOPIC) is not None
                                            and not self.clustered) else 0
        except BaseException:
            self.topics.close()
            self.data_dir_lock.release()
            raise
        if loaded:
            log.info("loaded %d consumer group(s) from __consumer_offsets", loaded)
        if self.topics.partition_logs(TRANSACTION_STATE_TOPIC) is not None and not self.clustered:
            # After the groups: completing a transaction left between its markers may commit
            # offsets the group coordinator holds pending.
            try:
                transactional_ids = self.transactions.load()
            except BaseException:
                self.topics.close()
                self.data_dir_lock.release()
                raise
            log.info("loaded %d transactional id(s) from %s", transactional_ids, TRANSACTION_STATE_TOPIC)
        loop = asyncio.get_running_loop()
        try:
            listeners = [Listener(sock, lambda: Connection(self))
                         for sock in listen_sockets(self.config.host, self.config.port)]
        except OSError as exc:
            self.topics.close()
            self.data_dir_lock.release()
            raise OSError(
                exc.errno,
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}; "
                "is another broker running there? pick another port with --listen",
            ) from None
        self._listeners = listeners
        self.port = listeners[0].port
        if self.config.zookeeper_connect is not None:
            try:
                await self._join_cluster(loop)
            except BaseException:
                for listener in listeners:
                    listener.close()
                self.topics.close()
                self.data_dir_lock.release()
                raise
        self._task_group = tg = asyncio.TaskGroup()
        await tg.__aenter__()
        # Everything below belongs to the group, and so do the connections' tasks
        # (Connection.connection_made): leaving the group joins them all.
        self._tasks = [
            tg.create_task(self.fetch_purgatory.run(), name="pulllog-purgatory-fetch"),
            tg.create_task(self.group_purgatory.run(), name="pulllog-purgatory-rebalance"),
            tg.create_task(self._housekeeping(), name="pulllog-housekeeping"),
            tg.create_task(self._shutdown_when_stopped(), name="pulllog-shutdown"),
        ]
        if self.replicas is not None:
            self.replicas.start(tg)
        self.accepting = True
        for listener in listeners:
            listener.start()
        self.cleaner = LogCleaner(self.config.data_dir, self._partition_logs, run_on_loop(loop),
                                  backoff_ms=self.config.cleaner_backoff_ms)
        self.cleaner.start()
        log.info("pulllog broker %d listening on %s:%d, data in %s (%d topic(s))",
                 self.config.node_id, self.config.host, self.port, self.config.data_dir, len(self.topics.topics))

    async def _join_cluster(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register in ZooKeeper under the advertised address and run for controller."""
        from ..cluster.errors import ClusterStartError
        from ..cluster.znodes import BrokerRegistration

        try:
            from ..cluster.membership import ClusterMembership
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("kazoo"):
                raise
            raise ClusterStartError("zookeeper.connect needs the ZooKeeper client kazoo: "
                                    "pip install 'pulllog[cluster]'") from None

        assert self.config.zookeeper_connect is not None
        host, port = self.advertised

        from ..cluster.membership import ControllerSettings

        def deliver(view: "ClusterView") -> None:  # on a ZooKeeper client thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._set_cluster_view, view)

        def deliver_partitions(views: "list[PartitionView]", removed: list[str]) -> None:  # ditto
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._apply_partition_views, views, removed)

        settings = ControllerSettings(
            unclean_leader_election=lambda: self.topics.defaults.unclean_leader_election_enable,
            auto_leader_rebalance=self.config.auto_leader_rebalance_enable,
            rebalance_interval_s=float(self.config.leader_imbalance_check_interval_seconds),
            imbalance_percentage=self.config.leader_imbalance_per_broker_percentage)
        membership = ClusterMembership(
            self.config.zookeeper_connect, BrokerRegistration(self.config.node_id, host, port), deliver,
            on_partitions=deliver_partitions, controller_settings=settings, cluster_id=self.topics.cluster_id,
            session_timeout_ms=self.config.zookeeper_session_timeout_ms,
            connection_timeout_ms=(self.config.zookeeper_connection_timeout_ms
                                   or self.config.zookeeper_session_timeout_ms))
        self.cluster_view = await asyncio.to_thread(membership.start)
        self.topics.cluster_id = membership.cluster_id  # every member answers with the cluster's id
        self.membership = membership
        from .producer_ids import ClusterProducerIds

        producer_ids = ClusterProducerIds(
            membership.claim_producer_id_block,
            lambda claim: self.task_group.create_task(claim, name="pulllog-producer-ids"))
        await producer_ids.start()
        self._cluster_producer_ids = producer_ids

    def _set_cluster_view(self, view: "ClusterView") -> None:
        # Views arrive in the order the watches made them (call_soon_threadsafe is FIFO, and
        # start's own result comes after the views it queued), so the last one is the newest.
        self.cluster_view = view
        self._wake_view_waiters()

    def _apply_partition_views(self, views: "list[PartitionView]", removed: list[str]) -> None:
        """ZooKeeper's news of partitions, on the loop: keep every view for Metadata, and hand
        this broker's own to the replica manager (``broker.replicas``), which makes this broker
        leader or follower by them. Views whose state the controller has not written yet are
        kept but not applied: there is no role to take up."""
        replicas = self.replicas  # the replica manager (issue 16's data path)
        node = self.config.node_id
        for name in removed:
            for key in [k for k in self.partition_views if k[0] == name]:
                del self.partition_views[key]
                self._replica_of.discard(key)
            if replicas is not None:
                replicas.remove_topic(name)
        self._apply_topic_configs(views)
        views = [_with_newest_state(self.partition_views.get((v.topic, v.partition)), v) for v in views]
        # Every view is kept before any is applied: a failing apply must not leave the views
        # after it out of Metadata (nor out of the replica manager).
        for view in views:
            self.partition_views[(view.topic, view.partition)] = view
        for view in views:
            key = (view.topic, view.partition)
            mine = node in view.replicas
            if not mine and key not in self._replica_of:
                if replicas is not None:  # a copy left from before a reassignment moved it away
                    replicas.drop_copy(view.topic, view.partition)
                continue
            if view.state is None:
                continue
            if mine:
                self._replica_of.add(key)
                if view.topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
                    # A replica of a coordinator partition may lead it at the next failover:
                    # build its coordinator now (importing it takes 0.2-0.4 s of this loop on
                    # a busy machine), not in the middle of the failover that makes it leader.
                    self._coordinator_of(view.topic)
            else:
                self._replica_of.discard(key)
            if replicas is not None:
                try:
                    replicas.apply(view)
                except Exception:  # a bug: logged, and the other partitions still follow their views
                    log.exception("applying %s-%d's view %s failed", view.topic, view.partition, view.state)
        if replicas is not None and (removed or any(v.topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
                                                    for v in views)):
            self._sync_coordinators()
        if self.marker_sender is not None:  # a marker waiting for a partition's leader goes now
            self.marker_sender.views_changed((v.topic, v.partition) for v in views)
        self._wake_view_waiters()

    def _sync_coordinators(self) -> None:
        """Make the coordinators own exactly the partitions of ``__consumer_offsets`` and
        ``__transaction_state`` this broker leads: a partition it became leader of is loaded
        from its log in the background (:meth:`_load_coordinator_partition`), one it no longer
        leads is unloaded (its groups and transactional ids go, with their timers; a load
        under way is abandoned). The coordinator epoch of a transaction partition is its
        leader epoch."""
        replicas = self.replicas
        assert replicas is not None
        leading: dict[tuple[str, int], int] = {
            key: replica.leader_epoch for key, replica in replicas.partitions.items()
            if key[0] in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC) and replica.is_leader}
        for key in [k for k in self.coordinating if k not in leading]:
            del self.coordinating[key]
            loading = self.loading.pop(key, None)
            if loading is not None:
                loading.cancel()  # its next step never runs: the unload below drops what it replayed
            self._coordinator_of(key[0]).unload_partition(key[1])
            log.info("no longer coordinating %s-%d", *key)
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            # The topic's count hashes the keys to its partitions (the transaction coordinator,
            # made on first use, takes it then).
            if topic == OFFSETS_TOPIC or self._transactions is not None or any(k[0] == topic for k in leading):
                self._coordinator_of(topic).set_partition_count(self.cluster_partition_count(topic))
        for key, epoch in sorted(leading.items()):  # offsets first: a transaction's completion commits offsets
            if key in self.coordinating:
                if self.coordinating[key] != epoch:  # still the leader, in a new epoch (an ISR shrink)
                    self.coordinating[key] = epoch
                    self._coordinator_of(key[0]).set_partition_epoch(key[1], epoch)
                continue
            self.coordinating[key] = epoch
            load = self._load_coordinator_partition(key, epoch)
            group = self._task_group
            self.loading[key] = (group.create_task(load) if group is not None
                                 else asyncio.get_running_loop().create_task(load))

    async def _load_coordinator_partition(self, key: tuple[str, int], epoch: int) -> None:
        """Load a coordinator partition this broker now leads, pausing between steps so other
        requests are served meanwhile (this partition's answer COORDINATOR_LOAD_IN_PROGRESS,
        see ``_owner``). A failure leaves the partition uncoordinated (NOT_COORDINATOR) until
        the next view tries again."""
        task = asyncio.current_task()
        try:
            if key[0] == TRANSACTION_STATE_TOPIC:  # after the offsets loads: a completion commits offsets
                offsets_loads = [t for k, t in self.loading.items() if k[0] == OFFSETS_TOPIC]
                if offsets_loads:
                    await asyncio.wait(offsets_loads)
            if self.coordinator_load_hook is not None:
                await self.coordinator_load_hook(key)
            steps = self._coordinator_of(key[0]).load_partition_in_steps(key[1], epoch)
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    loaded = done.value
                    break
                await asyncio.sleep(0)
        except OSError as exc:
            if self.loading.get(key) is task:
                del self.coordinating[key]
                self._coordinator_of(key[0]).unload_partition(key[1])
            log.error("cannot load %s-%d: %s", key[0], key[1], exc)
        except Exception:  # a bug: logged, never taking the broker's task group down
            log.exception("loading %s-%d failed", *key)
            if self.loading.get(key) is task:
                del self.coordinating[key]
                self._coordinator_of(key[0]).unload_partition(key[1])
        else:
            log.info("coordinating %s-%d (leader epoch %d): loaded %d", key[0], key[1], epoch, loaded)
        finally:
            if self.loading.get(key) is task:
                del self.loading[key]

    def _coordinator_of(self, topic: str) -> "GroupCoordinator | TransactionCoordinator":
        return self.groups if topic == OFFSETS_TOPIC else self.transactions

    def _apply_topic_configs(self, views: "list[PartitionView]") -> None:
        """A topic's overrides changed in ZooKeeper (AlterConfigs on any broker): this broker's
        copy of the topic takes them, as every replica's log must (min.insync.replicas, ...)."""
        seen: set[str] = set()
        for view in views:
            if view.topic in seen:
                continue
            seen.add(view.topic)
            topic = self.topics.find(view.topic)
            if topic is None or dict(topic.overrides) == dict(view.configs):
                continue
            try:
                self.topics.alter_config(view.topic, view.configs)
            except (ValueError, OSError) as exc:  # ConfigError is a ValueError
                log.error("cannot apply topic %s's configs from ZooKeeper: %s", view.topic, exc)

    def _wake_view_waiters(self) -> None:
        waiters, self._view_waiters = self._view_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_views(self, ready: "Callable[[], bool]", timeout_s: float) -> bool:
        """Wait until ``ready()`` holds over this broker's views (checked after every change
        ZooKeeper delivers), at most ``timeout_s``; whether it holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not ready():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._view_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return ready()
        return True

    async def alter_isr(self, state: "LeaderAndIsr", topic: str, partition: int) -> "LeaderAndIsr | None":
        """A leader's ISR change, written to the partition's state znode only if it is still at
        ``state.zk_version`` (the leader epoch unchanged, as Kafka's ZooKeeper mode did before
        AlterIsr). The state written, with its new version; None on a conflict (the controller
        or an earlier change moved it: wait for the next view and decide again)."""
        if self.membership is None:
            raise RuntimeError("alter_isr is for a cluster member (zookeeper.connect)")
        return await asyncio.to_thread(self.membership.update_isr, topic, partition, state)

    async def _leave_cluster(self) -> None:
        if self.membership is not None:
            await asyncio.to_thread(self.membership.stop)

    async def _shutdown_when_stopped(self) -> None:
        await self._stop.wait()
        if self.membership is not None and self.config.controlled_shutdown_enable:
            from .controlled_shutdown import controlled_shutdown

            try:
                await controlled_shutdown(self)  # while still serving: clients follow the new leaders
            except Exception:  # a bug: the stop goes on
                log.exception("controlled shutdown failed; stopping anyway")
        await self._shutdown_connections()
        if self.replicas is not None:
            self.replicas.shutdown()
        await self._leave_cluster()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()  # housekeeping; the purgatory drivers already returned

    async def _shutdown_connections(self) -> None:
        self.accepting = False
        for listener in self._listeners:
            listener.close()
        self.fetch_purgatory.shutdown()  # long polls answer now (cancelled), not in 30 s
        if self._groups is not None:
            self._groups.shutdown()
        self.group_purgatory.shutdown()
        for conn in list(self.connections):
            conn.begin_close()
        tasks = [c.task for c in list(self.connections) if c.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_S)
            if pending:
                log.warning("%d connection(s) still busy %.0f s after shutdown began; cancelling them",
                            len(pending), _SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)

    def _cancel_tasks(self) -> None:
        """Stop at once: refuse connections, cancel every task the broker started."""
        self.accepting = False
        for listener in self._listeners:
            listener.close()
        self.fetch_purgatory.shutdown()
        if self._groups is not None:
            self._groups.shutdown()
        self.group_purgatory.shutdown()
        for conn in list(self.connections):
            if conn.task is not None:
                conn.task.cancel()
        for task in self._tasks:
            task.cancel()
        if self.replicas is not None:
            self.replicas.shutdown()

    def _final_cleanup(self) -> None:
        if self._cleaned_up:
            return
        self._cleaned_up = True
        self.accepting = False
        for listener in self._listeners:
            listener.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        self.fetch_purgatory.shutdown()
        if self._groups is not None:
            self._groups.shutdown()
        self.group_purgatory.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()  # one batch at most, then the worker's exit; a pending swap is cancelled
        if self.membership is not None:
            self.membership.stop()  # after an error or a cancellation (else done already)
        if self.replicas is not None:
            self.replicas.shutdown()
            self.replicas.close()  # the high watermarks, before the logs close
        self.topics.close()  # flush every log and write its clean-shutdown marker
        self.data_dir_lock.release()
        log.info("pulllog broker %d stopped cleanly", self.config.node_id)

    # ------------------------------------------------------------------ housekeeping

    async def _flush_due_logs(self, now: int) -> None:
        """flush.ms and rolled segments: fsync the logs that are due on a worker thread, never
        on the loop (a slow disk would stall every connection), through the same flusher as
        flush.messages (broker/flusher.py), so a log has one flush under way at a time."""
        due = [partition_log for partition_log in list(self.topics.all_logs())
               if partition_log.flush_due(now) and not self.flusher.busy(partition_log)]
        if not due:
            return
        futures = self.flusher.flush(due)
        await asyncio.wait(futures)  # (not gather: cancelling housekeeping leaves the flush be)
        for partition_log, future in zip(due, futures):
            if not future.cancelled() and future.result() is not None:
                log.error("flush of %s failed: %s", partition_log.directory.name, future.result())

    def flush_logs(self, logs: Sequence[Log]) -> "list[asyncio.Future[FlushResult]]":
        return self.flusher.flush(logs)

    def defer_flush(self, log: Log) -> None:
        if self._task_group is None:  # starting (a transaction completed at load): no request waits
            try:
                log.flush()
            except OSError as exc:
                _log_flush_error(log.directory.name, exc)
            return
        future = self.flusher.flush([log])[0]
        future.add_done_callback(functools.partial(_log_flush_error, log.directory.name))
        if self._flush_collector is not None:
            self._flush_collector.append((log, future))

    @contextlib.contextmanager
    def collect_flushes(self) -> "Iterator[list[tuple[Log, asyncio.Future[FlushResult]]]]":
        collected: list[tuple[Log, asyncio.Future[FlushResult]]] = []
        outer, self._flush_collector = self._flush_collector, collected
        try:
            yield collected
        finally:
            self._flush_collector = outer

    @property
    def transactions(self) -> "TransactionCoordinator":
        """The transaction coordinator, created on first use: txn/ is not imported by a broker
        that never sees a transactional request (nor has ``__transaction_state`` on disk)."""
        if self._transactions is None:
            from ..txn.coordinator import TransactionCoordinator

            cfg = self.config
            writer: Callable[..., Any]
            if self.clustered:  # markers for partitions other brokers lead go to them
                from .txn_marker_sender import TxnMarkerSender

                self.marker_sender = TxnMarkerSender(self)
                writer = self.marker_sender.write
            else:
                # Looked up at each call, so a test can wrap the module's function.
                writer = functools.partial(_write_txn_markers, self)
            self._transactions = TransactionCoordinator(
                self.topics,
                writer,
                self.next_producer_id,
                state_partitions=cfg.transaction_state_log_num_partitions,
                state_segment_bytes=cfg.transaction_state_log_segment_bytes,
                max_timeout_ms=cfg.transaction_max_timeout_ms,
                id_expiration_ms=cfg.transactional_id_expiration_ms,
                flush_due=self.defer_flush,
                owner=self._owner(TRANSACTION_STATE_TOPIC) if self.clustered else None,
                appended=self._coordinator_appended if self.clustered else None,
            )
            if self.clustered:
                self._transactions.set_partition_count(self.cluster_partition_count(TRANSACTION_STATE_TOPIC))
        return self._transactions

    def _transaction_housekeeping(self, now: int, last_abort: int, last_expiry: int) -> tuple[int, int]:
        """Abort transactions past their timeout, retry missing markers, expire idle ids."""
        txns = self._transactions
        if txns is None:
            return last_abort, last_expiry
        cfg = self.config
        try:
            if now - last_abort >= cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms:
                last_abort = now
                txns.complete_pending()
                txns.abort_timed_out(now)
            if now - last_expiry >= cfg.transaction_remove_expired_transaction_cleanup_interval_ms:
                last_expiry = now
                expired = txns.expire_transactional_ids(now)
                if expired:
                    log.info("expired %d transactional id(s) past transactional.id.expiration.ms", expired)
        except OSError as exc:
            log.error("transaction housekeeping failed: %s", exc)
        return last_abort, last_expiry

    async def _housekeeping(self) -> None:
        interval_s = max(0.05, min(self.config.flush_scheduler_interval_ms,
                                   self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms, 1000) / 1000)
        last_retention = last_offsets_expiry = last_producer_expiry = last_checkpoint = wall_clock_ms()
        last_txn_abort = last_txn_expiry = last_checkpoint
        while True:
            await asyncio.sleep(interval_s)
            now = wall_clock_ms()
            await self._flush_due_logs(now)
            if now - last_checkpoint >= self.config.flush_offset_checkpoint_interval_ms:
                last_checkpoint = now
                await self.checkpoint_recovery_points()
            if now - last_retention >= self.config.retention_check_interval_ms:
                last_retention = now
                self.run_retention(now)
            if now - last_offsets_expiry >= self.config.offsets_retention_check_interval_ms:
                last_offsets_expiry = now
                try:
                    expired = self._groups.expire_offsets(now) if self._groups is not None else 0
                    if expired:
                        log.info("expired %d committed offset(s) past offsets.retention.minutes", expired)
                except OSError as exc:
                    log.error("offset expiry failed: %s", exc)
            if now - last_producer_expiry >= self.config.producer_id_expiration_check_interval_ms:
                last_producer_expiry = now
                self.expire_producer_ids(now)
            last_txn_abort, last_txn_expiry = self._transaction_housekeeping(now, last_txn_abort, last_txn_expiry)
            if self.replicas is not None:
                await self.replicas.housekeeping()

    async def checkpoint_recovery_points(self) -> None:
        """Write recovery-point-offset-checkpoint on a worker thread (two fsyncs and a
        rename); the points are read here, on the loop that owns the logs."""
        points = self.topics.recovery_points()
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.topics.write_recovery_checkpoint, points)
        except OSError as exc:  # costs only a longer check after a crash; retried next interval
            log.error("cannot write the recovery checkpoint: %s", exc)

    def run_retention(self, now: int | None = None) -> int:
        deleted = 0
        for partition_log in list(self.topics.all_logs()):
            try:
                deleted += partition_log.delete_old_segments(now)
            except OSError as exc:
                log.error("retention on %s failed: %s", partition_log.directory.name, exc)
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
            if self.cleaner is not None:
                self.cleaner.wake()  # its thread unlinks the files (see Log.files_to_unlink)
        return deleted

    def expire_producer_ids(self, now: int | None = None) -> int:
        """Forget idempotent producers idle for producer.id.expiration.ms, in every log."""
        now = wall_clock_ms() if now is None else now
        expired = sum(partition_log.remove_expired_producers(now, self.config.producer_id_expiration_ms)
                      for partition_log in list(self.topics.all_logs()))
        if expired:
            log.info("expired %d idle producer id(s) past producer.id.expiration.ms", expired)
        return expired

    def _partition_logs(self) -> list[tuple[str, int, Any]]:
        """(topic, partition, log) of every partition; called from the cleaner's thread, so
        it copies each container in one step (the loop may add or remove topics)."""
        return [(topic.name, partition.index, partition.log)
                for topic in list(self.topics.topics.values()) for partition in list(topic.partitions.values())
                if partition.log is not None]

    def _log_recovery_report(self) -> None:
        """One line per partition recovered, but past ``_UNDAMAGED_LINES`` the undamaged ones
        (nothing cut, nothing deleted) share one line: after a crash of a broker with
        10,000 partitions, 10,000 console lines took longer than the recovery itself."""
        undamaged = self.topics.undamaged_recoveries
        quiet = {line for line, _ in undamaged} if len(undamaged) > _UNDAMAGED_LINES else set()
        for line in self.recovery_report:
            if line not in quiet:
                log.warning("recovery: %s", line)
        if quiet:
            batches = sum(r.batches_checked for _, r in undamaged)
            segments = sum(r.segments_checked for _, r in undamaged)
            log.warning("recovery: %d partitions recovered after unclean shutdown, none damaged: checked %d "
                        "batch(es) in %d segment(s)", len(undamaged), batches, segments)

    # ------------------------------------------------------------------ for handlers

    def _coordinator_appended(self, partition_log: Log) -> None:
        """A coordinator appended to one of its partitions (cluster mode): followers hear of it
        now, and the request waits until they have it."""
        replicas = self.replicas
        if replicas is None:
            return
        for key in self.coordinating:
            replica = replicas.partitions.get(key)
            if replica is not None and replica.log is partition_log:
                self.on_append(*key)
                self.wait_for_replication(key[0], key[1], partition_log)
                return

    def _durably(self, write: "Callable[[], ErrorCode]") -> "asyncio.Future[ErrorCode]":
        """Run a coordinator's ``write`` now and give a future of its fate once its appends
        are in the ISR and fsynced where due (the same waits a request's ``collect_flushes``
        makes): NONE, the replication's code (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        REQUEST_TIMED_OUT), KAFKA_STORAGE_ERROR for a failed fsync, or ``write``'s own error.
        For appends that no request answers after (the group coordinator's SyncGroup record)."""
        from kio.schema.errors import ErrorCode

        with self.collect_flushes() as flushes:
            code = write()
        loop = asyncio.get_running_loop()
        if code is not ErrorCode.none or not flushes:
            done: asyncio.Future[ErrorCode] = loop.create_future()
            done.set_result(code)
            return done
        return loop.create_task(_flushes_outcome(flushes))

    def wait_for_replication(self, topic: str, index: int, partition_log: Log) -> None:
        collector, replicas = self._flush_collector, self.replicas
        if collector is None or replicas is None or (topic, index) not in replicas.partitions:
            return
        timeout_ms = _COORDINATOR_ACKS_TIMEOUT_MS.get(topic, 30_000)
        from kio.schema.errors import ErrorCode

        from .handlers import NotReplicatedError

        op = replicas.wait_for_acks(timeout_ms, [(topic, index, partition_log.log_end_offset)])
        replicated: asyncio.Future[FlushResult] = asyncio.get_running_loop().create_future()

        def done(result: "asyncio.Future[dict[tuple[str, int], Any]]") -> None:
            code = result.result().get((topic, index)) if not result.cancelled() else None
            if replicated.done():
                return
            if code is not None and int(code) == 0:
                replicated.set_result(None)
            else:  # answered as a failed append, with the replication's code (handlers map it)
                code = code if code is not None else ErrorCode.request_timed_out
                replicated.set_result(NotReplicatedError(int(code), f"{topic}-{index} was not replicated: "
                                                         f"{getattr(code, 'name', code)}"))

        op.result.add_done_callback(done)
        collector.append((partition_log, replicated))

    def cluster_partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has in the cluster (0: no view of it yet): the count
        its views carry from the topic's assignment. Not the views held: one partition's view
        can arrive before its topic's others, and a key hashed over too few partitions names
        the wrong coordinator (a coordinator that loaded its partition then took transactional
        ids of another broker's for its own, and refused their Produce
        INVALID_PRODUCER_ID_MAPPING)."""
        count = 0
        held = 0
        for key, view in self.partition_views.items():
            if key[0] == topic:
                held += 1
                count = max(count, view.partition_count)
        return count or held  # views that do not say (a test's own controller): as many as held

    def offsets_partition_count(self) -> int:
        if self.clustered:
            count = self.cluster_partition_count(OFFSETS_TOPIC)
        else:
            topic = self.topics.find(OFFSETS_TOPIC)
            count = topic.count if topic is not None else 0
        return count or self.config.offsets_topic_num_partitions

    def auto_create_topic(self, name: str) -> Topic:
        topic = self.topics.create(name, self.config.num_partitions)
        log.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.get(name)
        for partition in topic.partitions.values():
            self.fetch_purgatory.check_and_complete((name, partition.index))
        self.topics.delete(name)

    def on_append(self, topic: str, partition: int) -> None:
        self.fetch_purgatory.check_and_complete((topic, partition))
        if self.replicas is not None:  # a leader's append: with no follower in the ISR the HW moves now
            self.replicas.after_leader_append(topic, partition)

    def next_producer_id(self) -> int:
        """A new producer id; raises ProducerIdsNotReady while a cluster member's next block is
        on its way (the handlers answer COORDINATOR_LOAD_IN_PROGRESS)."""
        if self._cluster_producer_ids is not None:
            return self._cluster_producer_ids.next_id()
        self._next_producer_id += 1
        return self._next_producer_id


def _write_txn_markers(broker: "Broker", *args: Any) -> Any:
    from . import txn_markers

    return txn_markers.write_txn_markers(broker, *args)


async def _flushes_outcome(flushes: "list[tuple[Log, asyncio.Future[FlushResult]]]") -> "ErrorCode":
    from kio.schema.errors import ErrorCode

    from .handlers import NotReplicatedError, coordinator_flushes

    failed = await coordinator_flushes(flushes)
    for error in failed.values():
        if isinstance(error, NotReplicatedError):
            return ErrorCode(error.code)
    return ErrorCode.kafka_storage_error if failed else ErrorCode.none


def _with_newest_state(kept: "PartitionView | None", view: "PartitionView") -> "PartitionView":
    """``view``, with ``kept``'s state instead when that one is newer (a higher version of the
    same topic's state znode): a view made before a state change that arrived after it must
    not take this broker back to the old leader."""
    if kept is None or kept.state is None or kept.topic_id != view.topic_id:
        return view
    if view.state is None or 0 <= view.state.zk_version < kept.state.zk_version:
        return replace(view, state=kept.state)
    return view


class _FaultsOnFirstUse:
    """``broker.faults`` until something uses it: false, as a :class:`~pulllog.broker.faults.Faults`
    with no rule is (the one check the server makes per request), and on first use replaced
    by the real one, which it then forwards to. A broker that never injects a fault never
    imports broker/faults.py (its rule classes are a few ms of every start)."""

    __slots__ = ("_broker",)
    _lock = threading.Lock()

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def __bool__(self) -> bool:
        real = self._broker.faults
        return real is not self and bool(real)  # (someone may hold on to this one)

    def __getattr__(self, name: str) -> Any:
        with self._lock:  # a test's thread may set the first rule while the loop runs
            if isinstance(self._broker.faults, _FaultsOnFirstUse):
                from .faults import Faults

                self._broker.faults = Faults(self._broker.handlers.complete())
        return getattr(self._broker.faults, name)


def _report_failure(ready: "asyncio.Future[Broker] | None", exc: BaseException) -> None:
    """Tell whoever awaits ``ready`` that the broker will not listen."""
    if ready is None or ready.done():
        return
    if isinstance(exc, Exception):
        ready.set_exception(exc)
        ready.exception()  # serve() raises the same error: the future need not log it as unretrieved
    else:
        ready.cancel()  # a cancellation or an interrupt, not an error of the broker's
