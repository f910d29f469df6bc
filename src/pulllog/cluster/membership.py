"""A broker's membership of the cluster: its ZooKeeper session, its registration, the election.

One :class:`ClusterMembership` per clustered broker. :meth:`~ClusterMembership.start`
connects to ZooKeeper, creates the persistent paths Kafka's brokers create (``PERSISTENT_PATHS``),
registers this broker as the ephemeral ``/brokers/ids/<id>`` (refusing an id a live broker
holds), watches ``/brokers/ids`` and ``/controller``, and runs for controller. The znode
formats are in :mod:`pulllog.cluster.znodes`.

The election is Kafka's ZooKeeper-mode one: whoever creates the ephemeral ``/controller`` is
the controller. The candidate reads ``/controller_epoch`` (epoch *e*, znode version *v*) and
commits, in one ZooKeeper transaction, "create ``/controller``" and "set ``/controller_epoch``
to *e*+1 if its version is still *v*": losing either part loses both, so each epoch has exactly
one winner and every later controller has a higher one. Every broker watches ``/controller``;
when it goes (the controller's session ended: it stopped, crashed, or was cut off for longer
than ``zookeeper.session.timeout.ms``), each runs again and one wins.

Session expiry: the broker's own ephemeral znodes are gone with its session, so when the
client reconnects with a new session the broker registers again and runs for controller again
(as Kafka does); the watches re-arm themselves (kazoo's recipes do that).

Why kazoo, not aiozk: the controller's correctness rests on the ZooKeeper client's handling
of session states (connected, suspended, lost, re-established) and of watches across them.
kazoo is the long-maintained, widely used Python client; its session state machine, its
``DataWatch`` / ``ChildrenWatch`` recipes (re-armed after a lost session) and its multi-op
transactions are what this module needs, and they are exercised by many deployments. aiozk
would fit pulllog's asyncio model without threads, but it is a much smaller project with
fewer users. The price of kazoo is its threads, and it is small here: ZooKeeper traffic is
rare (a start, a broker joining or leaving, an election) and never on a request's path.
The broker calls :meth:`start` and :meth:`stop` through ``asyncio.to_thread``; watches run
on kazoo's callback thread and hand each new :class:`~pulllog.cluster.znodes.ClusterView` to
``on_change``, which the broker turns into a ``call_soon_threadsafe`` onto its event loop, so
request handlers still see state only on the loop.

Topics: every broker watches ``/brokers/topics`` (its children), each topic's assignment and
config, and each partition's state znode, and hands each change to ``on_partitions`` as
:class:`~pulllog.cluster.state.PartitionView` values (and the names of topics that went), so
every broker can answer Metadata for every partition and apply the roles of its own (this is
how roles reach brokers: they pull them from ZooKeeper, as KRaft brokers pull their metadata,
instead of being sent LeaderAndIsr requests). A watch belongs to one incarnation of a topic: a
topic deleted and created again gets new watches, and the old ones end at their next event.

The controller's work (:mod:`pulllog.cluster.active_controller`) runs while this broker holds
``/controller``: it starts on a won election and stops when ``/controller`` names another broker
or the session is lost. Every watch above also pokes it, as Kafka's controller watches the same
znodes. Writes a broker makes itself: a topic's creation (its config and assignment in one
transaction, as Kafka's admin code does), new partitions (conditional on the assignment's
version), a delete request, and a leader's ISR change (:meth:`ClusterMembership.update_isr`,
conditional on the state's version).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from .active_controller import ActiveController, ElectionResult, KnownTopic, ReassignmentError
from .controller import ElectionType, ReplicaAssignment
from .errors import (
    BrokerIdInUseError,
    ClusterStartError,
    NotControllerError,
    TopicAlreadyExistsError,
)
from .state import LeaderAndIsr, PartitionView
from .watches import PipelinedDataWatch
from .znodes import (
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID,
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    PERSISTENT_PATHS,
    PREFERRED_REPLICA_ELECTION,
    PRODUCER_ID_BLOCK,
    BrokerRegistration,
    ClusterView,
    ControllerRegistration,
    ProducerIdBlock,
    TopicAssignment,
    ZnodeFormatError,
    broker_path,
    decode_cluster_id,
    decode_epoch,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic_config,
    delete_topic_path,
    encode_cluster_id,
    encode_epoch,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic_config,
    next_producer_id_block,
    parse_zookeeper_connect,
    partition_state_path,
    topic_config_path,
    topic_path,
)

__all__ = ["ClusterMembership", "ControllerSettings"]

PartitionsCallback = Callable[[list[PartitionView], list[str]], None]


@dataclass(frozen=True)
class ControllerSettings:
    """How this broker's controller behaves when it is elected (broker settings)."""

    unclean_leader_election: Callable[[], bool] = lambda: False  # the broker default, read when needed
    auto_leader_rebalance: bool = False
    rebalance_interval_s: float = 300.0
    imbalance_percentage: int = 10

log = logging.getLogger("pulllog.cluster")


class ClusterMembership:
    """This broker's ZooKeeper session, registration and part in the controller election.

    ``on_change`` is called (on a kazoo thread) with every new :class:`ClusterView`; it must
    not block. :attr:`view` is the latest one.
    """

    def __init__(self, connect: str, registration: BrokerRegistration,
                 on_change: Callable[[ClusterView], None] = lambda view: None, *,
                 on_partitions: PartitionsCallback = lambda views, removed: None,
                 controller_settings: ControllerSettings | None = None,
                 session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000,
                 cluster_id: str = "") -> None:
        self.connect = connect
        # This broker's own id (meta.properties) until start: then the cluster's, /cluster/id.
        self.cluster_id = cluster_id
        hosts, self.chroot = parse_zookeeper_connect(connect)
        self.registration = registration
        self.broker_id = registration.broker_id
        self._on_change = on_change
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, logger=log)
        self._lock = threading.Lock()  # kazoo's callback thread and the caller's thread
        self._brokers: dict[int, BrokerRegistration] = {}
        self._controller_id = -1
        self._epoch = 0
        self._session_lost = False
        self._stopped = False
        self.view = ClusterView()
        self._on_partitions = on_partitions
        self._controller_settings = controller_settings or ControllerSettings()
        self.controller: ActiveController | None = None  # while this broker is the controller
        # The topics as the watches last saw them; a topic's generation tells its watches apart
        # from those of an earlier topic of the same name.
        self._generations: dict[str, int] = {}
        self._next_generation = 0
        self._assignments: dict[str, TopicAssignment] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[tuple[str, int], LeaderAndIsr | None] = {}
        self._watched: set[tuple[str, int]] = set()
        self._topics_before_register: set[str] = set()

    # ------------------------------------------------------------------ lifecycle (blocking)

    def start(self) -> ClusterView:
        """Connect, register, watch and run for controller; the view once that is done.

        Raises :class:`ClusterStartError` (ZooKeeper unreachable) or
        :class:`BrokerIdInUseError`; either way nothing is left running."""
        try:
            self._client.start(timeout=self._connection_timeout_s)
        except KazooTimeoutError:
            self._close()
            raise ClusterStartError(
                f"cannot reach ZooKeeper at {self.connect} within {self._connection_timeout_s:g} s "
                "(zookeeper.connection.timeout.ms); is it running there?") from None
        try:
            if self.chroot:
                self._client.ensure_path(self.chroot)  # Kafka creates its chroot too
            for path in PERSISTENT_PATHS:
                self._client.ensure_path(self._path(path))
            self.cluster_id = self._take_cluster_id()
            # The topics before this broker registers: the controller may delete one it was
            # waiting for this broker to delete (once all its replicas are live) before the
            # topics watch below is set, and the broker must still hear of it.
            self._topics_before_register = set(self._client.get_children(self._path(BROKER_TOPICS)))
            self._register()
            self._client.add_listener(self._on_session_state)
            # Brokers first: each watch reports at once, and the first view should list them.
            ChildrenWatch(self._client, self._path(BROKER_IDS), self._on_brokers)
            DataWatch(self._client, self._path(CONTROLLER), self._on_controller)
            ChildrenWatch(self._client, self._path(BROKER_TOPICS), self._on_topics)
            ChildrenWatch(self._client, self._path(DELETE_TOPICS), self._poke_controller)
            DataWatch(self._client, self._path(PREFERRED_REPLICA_ELECTION), self._poke_controller)
        except BaseException:
            self._close()
            raise
        return self.view

    def stop(self) -> None:
        """End the session: ZooKeeper deletes this broker's ephemeral znodes at once, so the
        others see it leave (and elect a new controller if it was the one). Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop_controller()
        self._close()
        log.info("broker %d left the cluster (ZooKeeper session closed)", self.broker_id)

    def _close(self) -> None:
        try:
            self._client.stop()
            self._client.close()
        except KazooException as exc:  # stopping anyway; the session times out on its own
            log.warning("closing the ZooKeeper session failed: %s", exc)

    @property
    def is_controller(self) -> bool:
        return self.view.controller_id == self.broker_id

    # ------------------------------------------------------------------ registration

    def _path(self, path: str) -> str:
        return self.chroot + path

    def _register(self) -> None:
        path = self._path(broker_path(self.broker_id))
        try:
            self._client.create(path, self.registration.encode(), ephemeral=True)
        except NodeExistsError:
            try:
                data, stat = self._client.get(path)
            except NoNodeError:  # its session ended just now: the id is free again
                self._client.create(path, self.registration.encode(), ephemeral=True)
            else:
                if stat.ephemeralOwner != self._client.client_id[0]:
                    raise BrokerIdInUseError(self._in_use_message(data)) from None
        log.info("broker %d registered in ZooKeeper at %s%s as %s:%d", self.broker_id, self.connect,
                 broker_path(self.broker_id), self.registration.host, self.registration.port)

    def _take_cluster_id(self) -> str:
        """The cluster's id: ours if we are the first broker, else the one ZooKeeper has."""
        path = self._path(CLUSTER_ID)
        self._client.ensure_path(self._path("/cluster"))
        try:
            self._client.create(path, encode_cluster_id(self.cluster_id))
            return self.cluster_id
        except NodeExistsError:
            data, _stat = self._client.get(path)
        try:
            cluster_id = decode_cluster_id(data)
        except ZnodeFormatError as exc:
            log.warning("%s; keeping this broker's own cluster id", exc)
            return self.cluster_id
        if cluster_id != self.cluster_id:
            log.info("broker %d takes the cluster's id %s (its data directory had %s)", self.broker_id,
                     cluster_id, self.cluster_id)
        return cluster_id

    def _in_use_message(self, data: bytes) -> str:
        try:
            other = BrokerRegistration.decode(self.broker_id, data)
            holder = f"the broker at {other.host}:{other.port}"
        except ZnodeFormatError:
            holder = "another broker"
        return (f"broker.id {self.broker_id} is already registered in ZooKeeper ({self.connect}"
                f"{broker_path(self.broker_id)}) by {holder}; give this broker another --broker-id, "
                "or stop that one first")

    # ------------------------------------------------------------------ watches (kazoo's thread)

    def _on_brokers(self, children: list[str]) -> None:
        brokers: dict[int, BrokerRegistration] = {}
        for child in children:
            if not child.isdigit():
                continue
            broker_id = int(child)
            try:
                data, _stat = self._client.get(self._path(broker_path(broker_id)))
                brokers[broker_id] = BrokerRegistration.decode(broker_id, data)
            except NoNodeError:  # gone between the listing and the read
                continue
            except ZnodeFormatError as exc:
                log.warning("ignoring a broker registration: %s", exc)
        with self._lock:
            before, self._brokers = set(self._brokers), brokers
        if set(brokers) != before:
            # Kafka's controller logs each change too; a failover's timeline starts here (the
            # moment ZooKeeper expired a dead broker's session, as this broker heard of it).
            log.info("broker %d sees brokers %s (joined %s, gone %s)", self.broker_id, sorted(brokers),
                     sorted(set(brokers) - before), sorted(before - set(brokers)))
        self._publish()
        self._poke_controller()

    def _on_controller(self, data: bytes | None, _stat: object, _event: object) -> None:
        controller_id, epoch = -1, None
        if data is not None:
            try:
                controller_id = ControllerRegistration.decode(data).broker_id
                epoch = self.controller_epoch()
            except ZnodeFormatError as exc:
                log.warning("unreadable %s or %s: %s", CONTROLLER, CONTROLLER_EPOCH, exc)
            except KazooException as exc:
                log.warning("cannot read %s: %s", CONTROLLER_EPOCH, exc)
        with self._lock:
            self._controller_id = controller_id
            if epoch is not None and epoch >= 0:
                self._epoch = epoch
            stopped = self._stopped or self._session_lost
        if controller_id != self.broker_id:
            self._stop_controller()  # resigned: another broker won, or /controller is gone
        self._publish()
        if data is None and not stopped:
            self._elect()

    def _on_session_state(self, state: str) -> None:
        # Called on kazoo's connection thread: it must not block, so the work is spawned.
        if state == KazooState.LOST:
            with self._lock:
                if self._stopped:  # our own close: nothing to rejoin
                    return
                self._session_lost = True
                self._controller_id = -1
            self._stop_controller()  # its ephemeral /controller is gone with the session
            log.warning("broker %d lost its ZooKeeper session; it registers again once reconnected",
                        self.broker_id)
            self._publish()
        elif state == KazooState.CONNECTED:
            with self._lock:
                rejoin, self._session_lost = self._session_lost and not self._stopped, False
            if rejoin:
                self._client.handler.spawn(self._rejoin)

    def _rejoin(self) -> None:
        try:
            self._register()
            self._elect()
        except BrokerIdInUseError as exc:
            log.error("%s", exc)
        except KazooException as exc:
            log.error("broker %d could not register again after its session expired: %s", self.broker_id, exc)

    # ------------------------------------------------------------------ the election

    def _elect(self) -> None:
        """Run for controller once; the /controller watch calls again when it goes."""
        controller = self._path(CONTROLLER)
        epoch_path = self._path(CONTROLLER_EPOCH)
        try:
            try:
                raw, stat = self._client.get(epoch_path)
            except NoNodeError:
                try:
                    self._client.create(epoch_path, encode_epoch(0))
                except NodeExistsError:
                    pass
                raw, stat = self._client.get(epoch_path)
            epoch = decode_epoch(raw) + 1
            epoch_version = stat.version + 1  # what our set below leaves: our writes check it
            txn = self._client.transaction()
            txn.create(controller, ControllerRegistration(self.broker_id).encode(), ephemeral=True)
            txn.set_data(epoch_path, encode_epoch(epoch), version=stat.version)
            results = txn.commit()
        except (KazooException, ZnodeFormatError) as exc:
            log.error("broker %d could not run for controller: %s", self.broker_id, exc)
            return
        if any(isinstance(r, Exception) for r in results):
            lost_to = [type(r).__name__ for r in results if isinstance(r, (NodeExistsError, BadVersionError))]
            log.debug("broker %d lost the controller election (%s)", self.broker_id, ", ".join(lost_to))
            return  # someone else won: the /controller watch reports who
        with self._lock:
            self._controller_id, self._epoch = self.broker_id, epoch
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, epoch)
        self._start_controller(epoch, epoch_version)
        self._publish()

    def controller_epoch(self) -> int:
        """The epoch in ZooKeeper now (a read; -1 when there is none yet)."""
        try:
            raw, _stat = self._client.get(self._path(CONTROLLER_EPOCH))
        except NoNodeError:
            return -1
        return decode_epoch(raw)

    # ------------------------------------------------------------------ the view

    def _publish(self) -> None:
        # Made and handed over under the lock: two threads publishing at once (the callback
        # thread and a reconnect's) hand their views over in the order they made them, so
        # the broker's last view is the newest (else it could keep a view without a broker
        # that came back, and answer that broker's partitions without a leader).
        with self._lock:
            view = ClusterView(tuple(self._brokers[b] for b in sorted(self._brokers)), self._controller_id,
                               self._epoch)
            self.view = view
            try:
                self._on_change(view)
            except Exception:  # a broker shutting down may have closed its loop
                log.debug("cluster view not delivered", exc_info=True)

    # ------------------------------------------------------------------ the controller's work

    def _start_controller(self, epoch: int, epoch_version: int) -> None:
        settings = self._controller_settings
        controller = ActiveController(
            self._client, self.chroot, self.broker_id, epoch, epoch_version,
            unclean_default=settings.unclean_leader_election, auto_rebalance=settings.auto_leader_rebalance,
            rebalance_interval_s=settings.rebalance_interval_s, imbalance_percentage=settings.imbalance_percentage,
            topics=self.known_topics)
        with self._lock:
            old, self.controller = self.controller, controller
            stopped = self._stopped
        if old is not None:
            old.stop()
        if not stopped:
            controller.start()

    def _stop_controller(self) -> None:
        with self._lock:
            controller, self.controller = self.controller, None
        if controller is not None:
            controller.stop()
            log.info("broker %d is no longer the controller", self.broker_id)

    def _poke_controller(self, *_args: object) -> None:
        controller = self.controller
        if controller is not None:
            controller.trigger()

    def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None,
                      election: ElectionType) -> dict[tuple[str, int], ElectionResult | None]:
        """ElectLeaders, run by the controller (blocking). NotControllerError elsewhere."""
        controller = self.controller
        if controller is None or not controller.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        return controller.elect_leaders(partitions, election)

    def alter_partition_reassignments(self, requests: Mapping[tuple[str, int], Sequence[int] | None]
                                      ) -> dict[tuple[str, int], ReassignmentError | None]:
        """AlterPartitionReassignments, run by the controller (blocking). NotControllerError
        elsewhere (see ActiveController.alter_reassignments)."""
        return self._active_controller().alter_reassignments(requests)

    def list_partition_reassignments(self, partitions: Iterable[tuple[str, int]] | None
                                     ) -> dict[tuple[str, int], ReplicaAssignment]:
        """ListPartitionReassignments, run by the controller (blocking). NotControllerError elsewhere."""
        return self._active_controller().list_reassignments(partitions)

    def _active_controller(self) -> ActiveController:
        controller = self.controller
        if controller is None or not controller.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        return controller

    def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> list[tuple[str, int]]:
        """ControlledShutdown, run by the controller (blocking): the partitions ``broker_id``
        still leads. NotControllerError elsewhere (see ActiveController.controlled_shutdown)."""
        controller = self.controller
        if controller is None or not controller.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        return controller.controlled_shutdown(broker_id, broker_epoch)

    def broker_epoch(self) -> int:
        """This broker's epoch as Kafka's ZooKeeper mode defines it: the creation zxid of its
        registration znode (blocking; -1 while it is not registered)."""
        stat = self._client.exists(self._path(broker_path(self.broker_id)))
        return stat.czxid if stat is not None else -1

    # ------------------------------------------------------------------ topics (kazoo's thread)

    def _on_topics(self, children: list[str]) -> None:
        current = set(children)
        with self._lock:
            removed = [t for t in self._generations if t not in current]
            removed += sorted(self._topics_before_register - current - set(self._generations))
            self._topics_before_register = set()
            added = [t for t in sorted(current) if t not in self._generations]
            for topic in removed:
                self._generations.pop(topic, None)
                self._assignments.pop(topic, None)
                self._configs.pop(topic, None)
                for key in [k for k in self._states if k[0] == topic]:
                    del self._states[key]
                self._watched = {k for k in self._watched if k[0] != topic}
            for topic in added:
                self._next_generation += 1
                self._generations[topic] = self._next_generation
            generations = {t: self._generations[t] for t in added}
            if removed:
                self._deliver([], removed)
        for topic in added:
            generation = generations[topic]
            DataWatch(self._client, self._path(topic_config_path(topic)),
                      lambda data, stat, event, t=topic, g=generation: self._on_config(t, g, data))
            DataWatch(self._client, self._path(topic_path(topic)),
                      lambda data, stat, event, t=topic, g=generation: self._on_assignment(t, g, data))
        self._poke_controller()

    def _current(self, topic: str, generation: int) -> bool:
        with self._lock:
            return self._generations.get(topic) == generation

    def _on_assignment(self, topic: str, generation: int, data: bytes | None) -> bool | None:
        if not self._current(topic, generation):
            return False  # the topic went (or is another one now): this watch ends
        if data is None:
            return None  # deleted: the /brokers/topics watch reports the topic's removal
        try:
            assignment = TopicAssignment.decode(topic, data)
        except ZnodeFormatError as exc:
            log.warning("ignoring topic %s: %s", topic, exc)
            return None
        with self._lock:
            self._assignments[topic] = assignment
            new = [p for p in sorted(assignment.partitions) if (topic, p) not in self._watched]
            self._watched.update((topic, p) for p in new)
        for partition in new:
            # Pipelined: a controller's transaction changes many states at once (watches.py).
            PipelinedDataWatch(self._client, self._path(partition_state_path(topic, partition)),
                               functools.partial(self._on_state, topic, generation, partition))
        self._deliver_topic(topic)
        self._poke_controller()
        return None

    def _on_config(self, topic: str, generation: int, data: bytes | None) -> bool | None:
        if not self._current(topic, generation):
            return False
        try:
            configs = decode_topic_config(topic, data)
        except ZnodeFormatError as exc:
            log.warning("ignoring the config of topic %s: %s", topic, exc)
            configs = {}
        with self._lock:
            self._configs[topic] = configs
        self._deliver_topic(topic)
        return None

    def _on_state(self, topic: str, generation: int, partition: int, data: bytes | None,
                  stat: object) -> bool | None:
        if not self._current(topic, generation):
            return False
        state = None
        if data is not None:
            try:
                state = decode_partition_state(topic, partition, data, getattr(stat, "version", -1))
            except ZnodeFormatError as exc:
                log.warning("ignoring a partition state: %s", exc)
        with self._lock:
            self._states[(topic, partition)] = state
            view = self._view(topic, partition)
            if view is not None:
                self._deliver([view], [])
        # The controller decides from this cache: a state it did not know yet (a leader's ISR
        # change that crossed its last pass) may need a decision of its own.
        self._poke_controller()
        return None

    def known_topics(self) -> dict[str, KnownTopic]:
        """Every topic as the watches last saw it: what the controller decides from. A
        partition whose state watch has not reported yet is left out (its report pokes the
        controller)."""
        with self._lock:
            return {topic: KnownTopic(assignment, self._configs.get(topic),
                                      {p: self._states[(topic, p)] for p in assignment.partitions
                                       if (topic, p) in self._states})
                    for topic, assignment in self._assignments.items()}

    def _view(self, topic: str, partition: int) -> PartitionView | None:
        """Under the lock."""
        assignment = self._assignments.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return None
        return PartitionView(topic, partition, assignment.topic_id, assignment.partitions[partition],
                             self._states.get((topic, partition)), dict(self._configs.get(topic, {})),
                             len(assignment.partitions))

    def _deliver_topic(self, topic: str) -> None:
        """Every partition of ``topic`` as the watches last saw it, delivered (if known)."""
        with self._lock:
            assignment = self._assignments.get(topic)
            if assignment is None:
                return
            views = [v for p in sorted(assignment.partitions) if (v := self._view(topic, p)) is not None]
            self._deliver(views, [])

    def partition_views(self) -> list[PartitionView]:
        """Every partition as the watches last saw it."""
        with self._lock:
            return [v for t, a in self._assignments.items() for p in sorted(a.partitions)
                    if (v := self._view(t, p)) is not None]

    def _deliver(self, views: list[PartitionView], removed: list[str]) -> None:
        """Under the lock: the watches run on kazoo's callback thread, but after a reconnect
        each re-reads its znode on a thread of its own, at once. Views made from the shared
        state and handed over under one lock reach the broker in the order they were made:
        a topic's views (its assignment's or config's watch) made before a state change can
        no longer arrive after the state watch's newer view and hide it until the next change."""
        try:
            self._on_partitions(views, removed)
        except Exception:  # a broker shutting down may have closed its loop
            log.debug("partition views not delivered", exc_info=True)

    # ------------------------------------------------------------------ a broker's writes (blocking)

    def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """Write a new topic's config and assignment in one transaction (the controller then
        elects its leaders). TopicAlreadyExistsError when it exists or awaits deletion."""
        topic = assignment.topic
        if self._client.exists(self._path(delete_topic_path(topic))) is not None:
            raise TopicAlreadyExistsError(f"topic {topic!r} is marked for deletion; create it again once it is gone")
        config_path = self._path(topic_config_path(topic))
        if self._client.exists(self._path(topic_path(topic))) is None and self._client.exists(config_path):
            self._client.delete(config_path)  # a leftover of a topic deleted half-way
        txn = self._client.transaction()
        txn.create(config_path, encode_topic_config(configs))
        txn.create(self._path(topic_path(topic)), assignment.encode())
        results = txn.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists")
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]

    def read_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The topic's assignment and its znode version, or None when there is no such topic."""
        try:
            data, stat = self._client.get(self._path(topic_path(topic)))
        except NoNodeError:
            return None
        return TopicAssignment.decode(topic, data), stat.version

    def write_assignment(self, assignment: TopicAssignment, version: int) -> bool:
        """Replace a topic's assignment if its znode is still at ``version`` (new partitions)."""
        try:
            self._client.set(self._path(topic_path(assignment.topic)), assignment.encode(), version=version)
        except (BadVersionError, NoNodeError):
            return False
        return True

    def write_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's overrides (``/config/topics/<topic>``); every broker's watch applies them."""
        path = self._path(topic_config_path(topic))
        try:
            self._client.set(path, encode_topic_config(configs))
        except NoNodeError:
            self._client.create(path, encode_topic_config(configs))

    def request_topic_deletion(self, topic: str) -> None:
        """Ask the controller to delete the topic (Kafka's /admin/delete_topics/<topic>)."""
        try:
            self._client.create(self._path(delete_topic_path(topic)), b"")
        except NodeExistsError:
            pass  # asked already

    def live_broker_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._brokers)

    def claim_producer_id_block(self) -> ProducerIdBlock:
        """The next block of producer ids, claimed for this broker (blocking): the block after
        the one ``/latest_producer_id_block`` names, written on condition that the znode did not
        change since it was read, so no two brokers claim the same block; a lost race re-reads."""
        path = self._path(PRODUCER_ID_BLOCK)
        while True:
            try:
                raw, stat = self._client.get(path)
            except NoNodeError:  # deleted by hand since this broker's start: the first block
                block = next_producer_id_block(None, self.broker_id)
                try:
                    self._client.create(path, encode_producer_id_block(block), makepath=True)
                except NodeExistsError:
                    continue
                return block
            block = next_producer_id_block(decode_producer_id_block(raw), self.broker_id)
            try:
                self._client.set(path, encode_producer_id_block(block), version=stat.version)
            except (BadVersionError, NoNodeError):
                continue  # another broker claimed one in between
            log.info("broker %d claimed producer ids %d..%d", self.broker_id, block.first, block.last)
            return block

    def update_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        """A leader's ISR change: written only if the state znode is still at
        ``state.zk_version`` (blocking). The written state with its new version, or None when
        the znode moved (a controller's election, or an earlier change): wait for the next view."""
        try:
            stat = self._client.set(self._path(partition_state_path(topic, partition)),
                                         encode_partition_state(state), version=state.zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version)
