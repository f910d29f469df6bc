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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from .errors import BrokerIdInUseError, ClusterStartError
from .znodes import (
    BROKER_IDS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PERSISTENT_PATHS,
    BrokerRegistration,
    ClusterView,
    ControllerRegistration,
    ZnodeFormatError,
    broker_path,
    decode_epoch,
    encode_epoch,
    parse_zookeeper_connect,
)

__all__ = ["ClusterMembership"]

log = logging.getLogger("pulllog.cluster")


class ClusterMembership:
    """This broker's ZooKeeper session, registration and part in the controller election.

    ``on_change`` is called (on a kazoo thread) with every new :class:`ClusterView`; it must
    not block. :attr:`view` is the latest one.
    """

    def __init__(self, connect: str, registration: BrokerRegistration,
                 on_change: Callable[[ClusterView], None] = lambda view: None, *,
                 session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000) -> None:
        self.connect = connect
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
            self._register()
            self._client.add_listener(self._on_session_state)
            # Brokers first: each watch reports at once, and the first view should list them.
            ChildrenWatch(self._client, self._path(BROKER_IDS), self._on_brokers)
            DataWatch(self._client, self._path(CONTROLLER), self._on_controller)
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
            self._brokers = brokers
        self._publish()

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
        with self._lock:
            view = ClusterView(tuple(self._brokers[b] for b in sorted(self._brokers)), self._controller_id,
                               self._epoch)
            self.view = view
        try:
            self._on_change(view)
        except Exception:  # a broker shutting down may have closed its loop
            log.debug("cluster view not delivered", exc_info=True)
