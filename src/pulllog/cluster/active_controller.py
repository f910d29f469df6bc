"""The controller's ZooKeeper side: run by the elected broker only, on its own thread.

:class:`~pulllog.cluster.membership.ClusterMembership` starts one :class:`ActiveController`
when its broker wins the election (with the epoch it won and the version of
``/controller_epoch`` its win left) and stops it when the broker loses ``/controller`` or its
session. Every trigger (a broker joins or leaves, a topic or partition appears, a delete or
preferred-election request, the election itself) only marks the controller *dirty*; its thread
then makes one pass over the whole cluster:

1. read the live brokers (``/brokers/ids``), the delete requests and the preferred-election
   request; take every topic's assignment, config and partition states from the broker's
   watches (``topics``: the cache :class:`~pulllog.cluster.membership.ClusterMembership`
   keeps, as Kafka's controller keeps its context from its watches), or read them from
   ZooKeeper when there is no cache;
2. delete the topics asked for (their znodes, then the request);
3. for every partition, decide what :func:`pulllog.cluster.controller.reconcile` says (a new
   partition's first leader, an election after a death or a return), plus the preferred
   elections asked for and, with ``auto.leader.rebalance.enable``, those the periodic
   imbalance check wants; write every decision in one ZooKeeper transaction;
4. finish each partition reassignment whose target replicas are all in the ISR: the topic's
   assignment (read again, with its version) and the partition's state in one transaction.

AlterPartitionReassignments and ListPartitionReassignments (:meth:`alter_reassignments`,
:meth:`list_reassignments`) run on the caller's thread under the same lock as a pass: a new
reassignment is written into the topic znode (RS, ``adding_replicas``, ``removing_replicas``,
conditional on the znode's version and fenced by the epoch) before the request is answered.

One pass decides from what it knows, so a new controller finishes whatever its predecessor
left (a partition still led by a dead broker, a half-deleted topic), and triggers that come
while a pass runs cost one more pass, not one each. A broker's death thus costs three reads
and one write however many partitions it held: what a failover waits for between ZooKeeper
expiring the dead broker's session and the brokers applying their new roles.

Fencing: the transaction's first operation is "``/controller_epoch`` is still at the version my
election left", then the conditional create or set of each state znode (at the version the
decision was based on). A newer controller's election bumps that version, so a deposed one's
writes fail whole; it then stops. The watches' cache may lag ZooKeeper (a leader's ISR change
not yet seen): then the transaction fails whole on that state's version, and each decision is
made again from a fresh read of its partition and written on its own (same fencing); one that
still loses makes the controller dirty: the next pass decides again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from .controller import (
    ElectionError,
    ElectionType,
    ReplicaAssignment,
    elect_by_request,
    electable_brokers,
    finish_reassignment,
    reconcile,
    restrict_to_replicas,
    shutdown_decision,
    strands_the_partition,
    validate_reassignment,
)
from .errors import BrokerNotAvailableError, NotControllerError, StaleBrokerEpochError
from .state import LeaderAndIsr
from .znodes import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    PREFERRED_REPLICA_ELECTION,
    TopicAssignment,
    ZnodeFormatError,
    broker_path,
    decode_partition_state,
    decode_preferred_election,
    decode_topic_config,
    delete_topic_path,
    encode_partition_state,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)

__all__ = ["ActiveController", "ElectionResult", "KnownTopic", "ReassignmentError", "replica_assignment"]

log = logging.getLogger("pulllog.cluster.controller")

_RETRY_S = 0.5  # after ZooKeeper refused a pass (connection loss): try again this soon
# State writes per ZooKeeper transaction: a request must stay under ZooKeeper's 1 MB
# jute.maxbuffer, and a state znode's write is ~150 bytes.
_WRITES_PER_TXN = 1000

ElectionResult = LeaderAndIsr | ElectionError


@dataclass(frozen=True)
class KnownTopic:
    """A topic as the watches last saw it: its assignment, its config overrides (None: not
    seen yet) and the state of each partition (None: it has none yet; absent: not seen yet)."""

    assignment: TopicAssignment
    configs: Mapping[str, str] | None
    states: Mapping[int, LeaderAndIsr | None]


@dataclass(frozen=True)
class _Decision:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: LeaderAndIsr  # what to write
    before: LeaderAndIsr | None  # what it was decided from (None: no state znode known: create it)

    @property
    def create(self) -> bool:
        return self.before is None

    def leader_changed(self) -> bool:
        return self.before is None or self.before.leader != self.state.leader


@dataclass(frozen=True)
class ReassignmentError:
    """Why AlterPartitionReassignments changed nothing for a partition (Kafka's error name)."""

    code: str  # "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REPLICA_ASSIGNMENT", "NO_REASSIGNMENT_IN_PROGRESS"
    message: str


def replica_assignment(assignment: TopicAssignment, partition: int) -> ReplicaAssignment:
    """One partition's replicas, adding and removing replicas, from its topic's znode."""
    return ReplicaAssignment(tuple(assignment.partitions[partition]), tuple(assignment.adding.get(partition, ())),
                             tuple(assignment.removing.get(partition, ())))


def _with_partition(assignment: TopicAssignment, partition: int, new: ReplicaAssignment) -> TopicAssignment:
    adding = {p: r for p, r in assignment.adding.items() if p != partition}
    removing = {p: r for p, r in assignment.removing.items() if p != partition}
    if new.adding:
        adding[partition] = new.adding
    if new.removing:
        removing[partition] = new.removing
    return TopicAssignment(assignment.topic, assignment.topic_id, {**assignment.partitions, partition: new.replicas},
                           adding, removing)


class FencedError(Exception):
    """A newer controller was elected: this one must stop writing."""


class ActiveController:
    """The controller's work while this broker holds ``/controller`` at ``epoch``."""

    def __init__(self, client: KazooClient, chroot: str, broker_id: int, epoch: int, epoch_zk_version: int, *,
                 unclean_default: Callable[[], bool] = lambda: False, auto_rebalance: bool = False,
                 rebalance_interval_s: float = 300.0, imbalance_percentage: int = 10,
                 topics: Callable[[], Mapping[str, KnownTopic]] | None = None) -> None:
        self._client = client
        self._known_topics = topics
        # What this controller wrote, at the versions its writes left, until the watches'
        # cache has caught up: a pass right after a transaction (a poke from one of its own
        # states arriving) must not decide again from the states the transaction replaced.
        self._written: dict[tuple[str, int], LeaderAndIsr] = {}
        self._chroot = chroot
        self.broker_id = broker_id
        self.epoch = epoch
        self._epoch_version = epoch_zk_version
        self._unclean_default = unclean_default
        self._auto_rebalance = auto_rebalance
        self._rebalance_interval_s = rebalance_interval_s
        self._imbalance_percentage = imbalance_percentage
        self._dirty = threading.Event()
        self._stopped = False
        self._work = threading.Lock()  # one pass or one ElectLeaders at a time
        self._next_rebalance = time.monotonic() + rebalance_interval_s
        self.passes = 0
        self.lost_transactions = 0  # transactions that lost to a newer state (decided again one by one)
        # Brokers in a controlled shutdown -> the creation zxid of the registration that asked
        # (its broker epoch): forgotten once that registration is gone. Read and written under
        # _work only.
        self._shutting_down: dict[int, int] = {}
        self._thread = threading.Thread(target=self._run, name=f"pulllog-controller-epoch-{epoch}", daemon=True)

    def _path(self, path: str) -> str:
        return self._chroot + path

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        log.info("broker %d takes up the controller's work (epoch %d)", self.broker_id, self.epoch)
        self._dirty.set()
        self._thread.start()

    def trigger(self) -> None:
        """Something in ZooKeeper changed: make a pass soon (never blocks)."""
        self._dirty.set()

    def stop(self) -> None:
        """Stop after the pass under way (its writes are fenced if a newer controller exists)."""
        self._stopped = True
        self._dirty.set()

    @property
    def active(self) -> bool:
        return not self._stopped

    def _run(self) -> None:
        while True:
            timeout = max(0.0, self._next_rebalance - time.monotonic()) if self._auto_rebalance else None
            self._dirty.wait(timeout)
            if self._stopped:
                return
            self._dirty.clear()
            rebalance = self._auto_rebalance and time.monotonic() >= self._next_rebalance
            if rebalance:
                self._next_rebalance = time.monotonic() + self._rebalance_interval_s
            try:
                with self._work:
                    self._pass(rebalance=rebalance)
            except FencedError:
                log.warning("controller epoch %d was superseded; broker %d stops acting as controller",
                            self.epoch, self.broker_id)
                self._stopped = True
                return
            except KazooException as exc:
                log.warning("controller pass failed (%s); retrying", exc)
                time.sleep(_RETRY_S)
                self._dirty.set()
            except Exception:  # a bug: log it, keep the controller alive for the next trigger
                log.exception("controller pass failed")

    # ------------------------------------------------------------------ one pass

    def live_brokers(self) -> set[int]:
        return {int(c) for c in self._client.get_children(self._path(BROKER_IDS)) if c.isdigit()}

    def _pass(self, *, rebalance: bool = False) -> None:
        self.passes += 1
        live = self.live_brokers()
        self._forget_shut_down(live)
        deletions = set(self._children(DELETE_TOPICS))
        for topic in sorted(deletions):
            self._delete_topic(topic, live)
        preferred = self._preferred_requests()
        decisions: list[_Decision] = []
        known = self._known_topics() if self._known_topics is not None else self._read_topics()
        self._written = {k: v for k, v in self._written.items() if k[0] in known and k[0] not in deletions}
        for topic, found in sorted(known.items()):
            if topic in deletions:
                continue
            assignment = found.assignment
            unclean = self._unclean(topic, found.configs)
            # A partition whose state the watches have not reported yet waits for the report.
            states = {p: self._newest(topic, p, found.states[p]) for p in assignment.partitions if p in found.states}
            wanted = set(self._imbalanced(assignment, states, live)) if rebalance else set()
            for partition, replicas in sorted(assignment.partitions.items()):
                if partition not in states:
                    continue
                state = states[partition]
                decision = self._decide(replicas, state, live, unclean,
                                        (topic, partition) in preferred or partition in wanted)
                if decision is not None:
                    decisions.append(_Decision(topic, partition, replicas, decision, state))
        for start in range(0, len(decisions), _WRITES_PER_TXN):
            self._write_all(decisions[start:start + _WRITES_PER_TXN], live, preferred)
        if preferred:
            self._delete_quietly(PREFERRED_REPLICA_ELECTION)
        self._follow_reassignments(known, deletions, live)

    # ------------------------------------------------------------------ reassignments (KIP-455)

    def _follow_reassignments(self, known: Mapping[str, KnownTopic], deletions: Collection[str],
                              live: Collection[int]) -> None:
        """Finish every reassignment whose target replicas are all in sync (controller.py's
        table). Decided from the watches' cache; each is decided again from a fresh read of
        its topic's assignment and its state, and written with both at the versions read."""
        for topic, found in sorted(known.items()):
            assignment = found.assignment
            if topic in deletions or not (assignment.adding or assignment.removing):
                continue
            for partition in sorted(assignment.partitions):
                if partition not in found.states:
                    continue
                state = self._newest(topic, partition, found.states[partition])
                current = replica_assignment(assignment, partition)
                if not current.reassigning:
                    continue
                electable = electable_brokers(live, self._shutting_down, state)
                if finish_reassignment(current, state, electable, self.epoch) is not None:
                    self._finish_reassignment(topic, partition, live)

    def _finish_reassignment(self, topic: str, partition: int, live: Collection[int]) -> None:
        found = self._versioned_assignment(topic)
        if found is None or partition not in found[0].partitions:
            return
        assignment, version = found
        state = self._state(topic, partition)
        done = finish_reassignment(replica_assignment(assignment, partition), state,
                                   electable_brokers(live, self._shutting_down, state), self.epoch)
        if done is None:
            return
        new, decision = done
        if self._write_assignment(_with_partition(assignment, partition, new), version, {partition: decision}):
            log.info("controller (epoch %d): reassignment of %s-%d done: replicas %s, leader %d, leader epoch %d, "
                     "ISR %s", self.epoch, topic, partition, list(new.replicas), decision.leader,
                     decision.leader_epoch, list(decision.isr))
        else:
            self._dirty.set()

    def _write_assignment(self, assignment: TopicAssignment, version: int,
                          states: Mapping[int, LeaderAndIsr]) -> bool:
        """Write a topic's assignment (at ``version``) and some of its partitions' states (each
        at its ``zk_version``) in one transaction, fenced by the controller epoch. False when the
        assignment or a state moved meanwhile; FencedError when a newer controller exists."""
        txn = self._client.transaction()
        txn.check(self._path(CONTROLLER_EPOCH), self._epoch_version)
        txn.set_data(self._path(topic_path(assignment.topic)), assignment.encode(), version=version)
        for partition, state in sorted(states.items()):
            txn.set_data(self._path(partition_state_path(assignment.topic, partition)), encode_partition_state(state),
                         version=state.zk_version)
        results = txn.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise FencedError()
        if any(isinstance(r, Exception) for r in results):
            log.debug("assignment of %s changed while deciding (%s)", assignment.topic,
                      [type(r).__name__ for r in results])
            return False
        for (partition, state), result in zip(sorted(states.items()), results[2:], strict=True):
            self._remember(assignment.topic, partition, state, result)
        return True

    def alter_reassignments(self, requests: Mapping[tuple[str, int], Sequence[int] | None]
                            ) -> dict[tuple[str, int], ReassignmentError | None]:
        """AlterPartitionReassignments (blocking; call it off the event loop): per partition a
        target replica list, or None to cancel the reassignment under way. Each accepted one
        is written (RS, adding and removing replicas in the topic znode; one already complete,
        as a cancel is, finished at once with its state) before the answer: None for it, else
        why not. NotControllerError when a newer controller was elected."""
        out: dict[tuple[str, int], ReassignmentError | None] = {}
        by_topic: dict[str, dict[int, Sequence[int] | None]] = {}
        for (topic, partition), target in requests.items():
            by_topic.setdefault(topic, {})[partition] = target
        with self._work:
            try:
                live = self.live_brokers()
                deletions = set(self._children(DELETE_TOPICS))
                for topic, wanted in sorted(by_topic.items()):
                    out.update(self._reassign_topic(topic, wanted, live, topic in deletions))
            except FencedError:
                self._stopped = True
                self._dirty.set()
                raise NotControllerError(f"broker {self.broker_id}'s controller epoch {self.epoch} was superseded") \
                    from None
        self._dirty.set()  # the next pass finishes what is complete meanwhile
        return out

    def _reassign_topic(self, topic: str, wanted: Mapping[int, Sequence[int] | None], live: Collection[int],
                        deleting: bool) -> dict[tuple[str, int], ReassignmentError | None]:
        for _attempt in range(5):  # a lost race with another write of the topic znode: read again
            results: dict[tuple[str, int], ReassignmentError | None] = {}
            found = None if deleting else self._versioned_assignment(topic)
            if found is None:
                return {(topic, p): ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist.")
                        for p in wanted}
            assignment, version = found
            states: dict[int, LeaderAndIsr] = {}
            for partition, target in sorted(wanted.items()):
                outcome = self._reassign_partition(assignment, partition, target, live)
                if isinstance(outcome, ReassignmentError):
                    results[(topic, partition)] = outcome
                    continue
                new, state = outcome
                assignment = _with_partition(assignment, partition, new)
                if state is not None:
                    states[partition] = state
                results[(topic, partition)] = None
            if all(r is not None for r in results.values()) or self._write_assignment(assignment, version, states):
                for (_t, partition), r in sorted(results.items()):
                    if r is None:
                        log.info("controller (epoch %d): %s-%d reassigned: replicas %s, adding %s, removing %s",
                                 self.epoch, topic, partition, list(assignment.partitions[partition]),
                                 list(assignment.adding.get(partition, ())),
                                 list(assignment.removing.get(partition, ())))
                return results
        return {(topic, p): ReassignmentError("REQUEST_TIMED_OUT", "the topic's assignment kept changing; try again")
                for p in wanted}

    def _reassign_partition(self, assignment: TopicAssignment, partition: int, target: Sequence[int] | None,
                            live: Collection[int]) -> ReassignmentError | tuple[ReplicaAssignment, LeaderAndIsr | None]:
        """One partition's new assignment and the state to write with it (None: unchanged)."""
        if partition not in assignment.partitions:
            return ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist.")
        current = replica_assignment(assignment, partition)
        alive = set(live) - set(self._shutting_down)
        if target is None:
            if not current.reassigning:
                return ReassignmentError("NO_REASSIGNMENT_IN_PROGRESS",
                                         f"no reassignment of {assignment.topic}-{partition} is in progress")
            target = current.origin
        else:
            why = validate_reassignment(target, current, alive)
            if why is not None:
                return ReassignmentError("INVALID_REPLICA_ASSIGNMENT", why)
        new = current.reassign_to(target)
        state = self._state(assignment.topic, partition)
        if state is None:
            return new, None
        electable = electable_brokers(live, self._shutting_down, state)
        if strands_the_partition(state, new.replicas, electable):
            return ReassignmentError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"replicas {list(new.replicas)} would leave {assignment.topic}-{partition} without its "
                f"in-sync replicas {list(state.isr)} (leader {state.leader}), and their copies would be "
                f"deleted: include one of them, or wait for the target to catch up")
        done = finish_reassignment(new, state, electable, self.epoch)
        if done is not None:
            return done
        # Replicas of an earlier target that the new one drops leave the ISR now, with their copy.
        return new, restrict_to_replicas(state, new.replicas, electable, self.epoch)

    def list_reassignments(self, partitions: Iterable[tuple[str, int]] | None
                           ) -> dict[tuple[str, int], ReplicaAssignment]:
        """ListPartitionReassignments (blocking): the partitions under reassignment, of those
        asked (None: all), read from ZooKeeper; one not reassigning or not existing is left out."""
        wanted: dict[str, set[int] | None] = {}
        if partitions is None:
            wanted = {topic: None for topic in self._children(BROKER_TOPICS)}
        else:
            for topic, partition in partitions:
                chosen = wanted.setdefault(topic, set())
                assert chosen is not None
                chosen.add(partition)
        out: dict[tuple[str, int], ReplicaAssignment] = {}
        for topic, chosen in sorted(wanted.items()):
            assignment = self._assignment(topic)
            if assignment is None:
                continue
            for partition in sorted(assignment.partitions):
                if (chosen is None or partition in chosen) and assignment.reassigning(partition):
                    out[(topic, partition)] = replica_assignment(assignment, partition)
        return out

    def _newest(self, topic: str, partition: int, cached: LeaderAndIsr | None) -> LeaderAndIsr | None:
        """The cache's state, or this controller's own later write of it."""
        written = self._written.get((topic, partition))
        if written is None:
            return cached
        if cached is not None and cached.zk_version >= written.zk_version:
            del self._written[(topic, partition)]  # the watch has caught up
            return cached
        return written

    def _remember(self, topic: str, partition: int, decision: LeaderAndIsr, result: object) -> None:
        """Keep a written state at the version its write left (a create leaves 0)."""
        version = getattr(result, "version", 0)
        self._written[(topic, partition)] = LeaderAndIsr(decision.leader, decision.leader_epoch, decision.isr,
                                                         decision.controller_epoch, version)

    def _decide(self, replicas: tuple[int, ...], state: LeaderAndIsr | None, live: Collection[int],
                unclean: bool, preferred: bool) -> LeaderAndIsr | None:
        electable = electable_brokers(live, self._shutting_down, state)  # not one shutting down
        decision = reconcile(replicas, state, electable, self.epoch, unclean=unclean)
        if decision is None and state is not None and preferred:
            chosen = elect_by_request(state, replicas, electable, self.epoch, ElectionType.PREFERRED)
            decision = chosen if isinstance(chosen, LeaderAndIsr) else None
        return decision

    def _read_topics(self) -> dict[str, KnownTopic]:
        """Every topic read from ZooKeeper (a controller without the watches' cache)."""
        out: dict[str, KnownTopic] = {}
        for topic in self._children(BROKER_TOPICS):
            assignment = self._assignment(topic)
            if assignment is not None:
                out[topic] = KnownTopic(assignment, None, {p: self._state(topic, p) for p in assignment.partitions})
        return out

    def _write_all(self, decisions: list[_Decision], live: Collection[int],
                   preferred: set[tuple[str, int]]) -> None:
        """Write the decisions in one transaction; if it fails on a state that moved (the
        cache lagged), decide each again from a fresh read and write it alone."""
        # A new partition's state needs its parent znodes, but never for a topic that is gone
        # (deleted while the cache still had it: creating them would bring its path back).
        decisions = [d for d in decisions if not d.create or self._client.exists(self._path(topic_path(d.topic)))]
        if not decisions:
            return
        for d in decisions:
            if d.create:
                self._client.ensure_path(self._path(partitions_path(d.topic)) + f"/{d.partition}")
        txn = self._client.transaction()
        txn.check(self._path(CONTROLLER_EPOCH), self._epoch_version)
        for d in decisions:
            path = self._path(partition_state_path(d.topic, d.partition))
            if d.create:
                txn.create(path, encode_partition_state(d.state))
            else:
                txn.set_data(path, encode_partition_state(d.state), version=d.state.zk_version)
        results = txn.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise FencedError()
        if not any(isinstance(r, Exception) for r in results):
            for d, result in zip(decisions, results[1:], strict=True):
                self._remember(d.topic, d.partition, d.state, result)
            self._log_decisions(decisions)
            return
        self.lost_transactions += 1
        log.debug("controller (epoch %d): %d state write(s) lost to newer states (%s); deciding each again",
                  self.epoch, len(decisions), [type(r).__name__ for r in results])
        for d in decisions:
            assignment = self._assignment(d.topic)
            if assignment is None or d.partition not in assignment.partitions:
                continue  # deleted meanwhile
            state = self._state(d.topic, d.partition)
            unclean = self._unclean(d.topic, None)
            again = self._decide(assignment.partitions[d.partition], state, live, unclean,
                                 (d.topic, d.partition) in preferred)
            if again is not None:
                self._write(d.topic, d.partition, again, create=state is None)

    def _log_decision(self, topic: str, partition: int, decision: LeaderAndIsr) -> None:
        log.info("controller (epoch %d): %s-%d leader %d, leader epoch %d, ISR %s", self.epoch, topic, partition,
                 decision.leader, decision.leader_epoch, list(decision.isr))

    def _log_decisions(self, decisions: list[_Decision]) -> None:
        """One line for a transaction's decisions (each partition's at DEBUG): a broker's death
        changes every partition it held, and a line per partition through the console's
        handler costs more CPU than the whole transaction, just when the brokers need it to
        take up their new roles."""
        if len(decisions) == 1:
            d = decisions[0]
            self._log_decision(d.topic, d.partition, d.state)
            return
        leaders = [f"{d.topic}-{d.partition}:{d.state.leader}" for d in decisions if d.leader_changed()]
        log.info("controller (epoch %d): %d partition state(s) written in one transaction; new leaders %s, "
                 "the others' ISR changed", self.epoch, len(decisions), " ".join(leaders) or "none")
        if log.isEnabledFor(logging.DEBUG):
            for d in decisions:
                log.debug("controller (epoch %d): %s-%d leader %d, leader epoch %d, ISR %s", self.epoch, d.topic,
                          d.partition, d.state.leader, d.state.leader_epoch, list(d.state.isr))

    def _imbalanced(self, assignment: TopicAssignment, states: dict[int, LeaderAndIsr | None],
                    live: Collection[int]) -> Iterable[int]:
        """Partitions of this topic whose preferred leader should take over (Kafka's imbalance
        check, per topic here: a broker leading less than its share by more than the percentage)."""
        by_preferred: dict[int, list[int]] = {}
        for partition, replicas in assignment.partitions.items():
            if replicas:
                by_preferred.setdefault(replicas[0], []).append(partition)
        for broker, partitions in by_preferred.items():
            if broker not in live:
                continue
            not_led = [p for p in partitions if (s := states.get(p)) is not None and s.leader != broker]
            if len(not_led) * 100 > self._imbalance_percentage * len(partitions):
                yield from not_led

    def _write(self, topic: str, partition: int, decision: LeaderAndIsr, *, create: bool) -> bool:
        path = self._path(partition_state_path(topic, partition))
        if create:
            self._client.ensure_path(self._path(partitions_path(topic)) + f"/{partition}")
        txn = self._client.transaction()
        txn.check(self._path(CONTROLLER_EPOCH), self._epoch_version)
        if create:
            txn.create(path, encode_partition_state(decision))
        else:
            txn.set_data(path, encode_partition_state(decision), version=decision.zk_version)
        results = txn.commit()
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise FencedError()
        if any(isinstance(r, Exception) for r in results):
            # The state moved under us (the leader's ISR change, or another writer): decide again.
            log.debug("state of %s-%d changed while deciding (%s); another pass", topic, partition,
                      [type(r).__name__ for r in results])
            self._dirty.set()
            return False
        self._remember(topic, partition, decision, results[1])
        self._log_decision(topic, partition, decision)
        return True

    def _delete_topic(self, topic: str, live: Collection[int]) -> None:
        """Kafka's order: the topic's partitions and assignment, its config, then the request.

        As Kafka's ZooKeeper mode, only once every replica is live: a broker drops its logs
        when it sees the topic go, so one that is down would keep them. The request waits
        (the topic stays, marked for deletion) and the pass after the broker's return
        finishes it."""
        assignment = self._assignment(topic)
        if assignment is not None:
            down = sorted({r for replicas in assignment.partitions.values() for r in replicas} - set(live))
            if down:
                log.info("controller (epoch %d): deleting topic %s waits for its replicas on broker(s) %s",
                         self.epoch, topic, down)
                return
        self._check_epoch()
        try:
            self._client.delete(self._path(topic_path(topic)), recursive=True)
        except NoNodeError:
            pass
        self._delete_quietly(topic_config_path(topic))
        self._delete_quietly(delete_topic_path(topic))
        log.info("controller (epoch %d): deleted topic %s", self.epoch, topic)

    def _check_epoch(self) -> None:
        try:
            _data, stat = self._client.get(self._path(CONTROLLER_EPOCH))
        except NoNodeError:
            raise FencedError() from None
        if stat.version != self._epoch_version:
            raise FencedError()

    # ------------------------------------------------------------------ ElectLeaders

    def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None,
                      election: ElectionType) -> dict[tuple[str, int], ElectionResult | None]:
        """Run elections now (blocking; call it off the event loop). ``None`` asks for every
        partition. Per partition: the new leadership, an :class:`ElectionError`, or None for
        a partition that does not exist."""
        with self._work:
            live = self.live_brokers()
            if partitions is None:
                every = []
                for topic in self._children(BROKER_TOPICS):
                    found = self._assignment(topic)
                    every += [(topic, p) for p in sorted(found.partitions)] if found is not None else []
                partitions = every
            out: dict[tuple[str, int], ElectionResult | None] = {}
            assignments: dict[str, TopicAssignment | None] = {}
            for topic, partition in partitions:
                if topic not in assignments:
                    assignments[topic] = self._assignment(topic)
                assignment = assignments[topic]
                if assignment is None or partition not in assignment.partitions:
                    out[(topic, partition)] = None
                    continue
                state = self._state(topic, partition)
                chosen = elect_by_request(state, assignment.partitions[partition],
                                          electable_brokers(live, self._shutting_down, state), self.epoch, election)
                if isinstance(chosen, LeaderAndIsr) and not self._write(topic, partition, chosen, create=False):
                    chosen = ElectionError("ELIGIBLE_LEADERS_NOT_AVAILABLE",
                                           "the partition's state changed during the election; try again")
                out[(topic, partition)] = chosen
            return out

    # ------------------------------------------------------------------ ControlledShutdown

    def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> list[tuple[str, int]]:
        """A broker stopping cleanly (blocking; call it off the event loop): mark it shutting
        down, move the leadership of its partitions to other in-sync replicas and take it out
        of the ISRs of those it follows, each write fenced as any other. Returns the partitions
        (with more than one replica) it still leads. Raises BrokerNotAvailableError (not
        registered), StaleBrokerEpochError (asked by an earlier registration) or
        NotControllerError (a newer controller was elected)."""
        with self._work:
            stat = self._client.exists(self._path(broker_path(broker_id)))
            if stat is None:
                raise BrokerNotAvailableError(f"broker {broker_id} is not registered")
            if 0 <= broker_epoch < stat.czxid:
                raise StaleBrokerEpochError(f"broker epoch {broker_epoch} of broker {broker_id} is older than its "
                                            f"registration's ({stat.czxid})")
            self._shutting_down[broker_id] = stat.czxid
            log.info("controller (epoch %d): controlled shutdown of broker %d", self.epoch, broker_id)
            live = self.live_brokers()
            remaining: list[tuple[str, int]] = []
            deletions = set(self._children(DELETE_TOPICS))
            try:
                for topic in sorted(self._children(BROKER_TOPICS)):
                    assignment = self._assignment(topic)
                    if assignment is None or topic in deletions:
                        continue  # Kafka leaves a topic queued for deletion alone too
                    for partition, replicas in sorted(assignment.partitions.items()):
                        if broker_id in replicas and self._shut_down_partition(topic, partition, replicas,
                                                                              broker_id, live):
                            remaining.append((topic, partition))
            except FencedError:
                self._stopped = True
                self._dirty.set()
                raise NotControllerError(f"broker {self.broker_id}'s controller epoch {self.epoch} was superseded") \
                    from None
            return remaining

    def _shut_down_partition(self, topic: str, partition: int, replicas: tuple[int, ...], broker_id: int,
                             live: Collection[int]) -> bool:
        """One partition of a broker in a controlled shutdown; True when it still leads it."""
        for _attempt in range(3):  # a lost race with the leader's own ISR change: read again
            state = self._state(topic, partition)
            if state is None:
                return False
            decision = shutdown_decision(state, replicas, broker_id, live, self._shutting_down, self.epoch)
            if decision is None or self._write(topic, partition, decision, create=False):
                leader = decision.leader if decision is not None else state.leader
                return leader == broker_id and len(replicas) > 1
        return True

    def _forget_shut_down(self, live: Collection[int]) -> None:
        """Drop the brokers whose registration that asked for a controlled shutdown is gone
        (Kafka forgets a shutting-down broker when it dies); a registration that came back under
        the same id is a new broker."""
        for broker_id, czxid in list(self._shutting_down.items()):
            stat = self._client.exists(self._path(broker_path(broker_id))) if broker_id in live else None
            if stat is None or stat.czxid != czxid:
                del self._shutting_down[broker_id]

    # ------------------------------------------------------------------ reads

    def _children(self, path: str) -> list[str]:
        try:
            return self._client.get_children(self._path(path))
        except NoNodeError:
            return []

    def _assignment(self, topic: str) -> TopicAssignment | None:
        found = self._versioned_assignment(topic)
        return None if found is None else found[0]

    def _versioned_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The topic's assignment and its znode's version (for a conditional write), or None
        when it has none or one that does not decode."""
        try:
            data, stat = self._client.get(self._path(topic_path(topic)))
            return TopicAssignment.decode(topic, data), stat.version
        except NoNodeError:
            return None
        except ZnodeFormatError as exc:
            log.warning("ignoring topic %s: %s", topic, exc)
            return None

    def _state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        try:
            data, stat = self._client.get(self._path(partition_state_path(topic, partition)))
        except NoNodeError:
            return None
        try:
            return decode_partition_state(topic, partition, data, stat.version)
        except ZnodeFormatError as exc:
            log.warning("ignoring a partition state: %s", exc)
            return None

    def _unclean(self, topic: str, configs: Mapping[str, str] | None) -> bool:
        """The topic's unclean.leader.election.enable: from ``configs`` (the watches' copy), or
        read when they are None."""
        if configs is None:
            try:
                data, _stat = self._client.get(self._path(topic_config_path(topic)))
            except NoNodeError:
                data = b""
            try:
                configs = decode_topic_config(topic, data)
            except ZnodeFormatError:
                configs = {}
        value = configs.get("unclean.leader.election.enable")
        return value.strip().lower() == "true" if value is not None else self._unclean_default()

    def _preferred_requests(self) -> set[tuple[str, int]]:
        try:
            data, _stat = self._client.get(self._path(PREFERRED_REPLICA_ELECTION))
        except NoNodeError:
            return set()
        try:
            return set(decode_preferred_election(data)) or {("", -1)}  # an empty request still gets deleted
        except ZnodeFormatError as exc:
            log.warning("ignoring %s: %s", PREFERRED_REPLICA_ELECTION, exc)
            return {("", -1)}

    def _delete_quietly(self, path: str) -> None:
        try:
            self._client.delete(self._path(path))
        except (NoNodeError, NodeExistsError):
            pass
