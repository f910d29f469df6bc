"""A consumer group member's state, as one table of transitions (the member's side).

The states (Kafka's AbstractCoordinator.MemberState, plus leaving, failed and closed)::

    UNJOINED --JOIN_SENT--> PREPARING_REBALANCE --JOINED--> COMPLETING_REBALANCE --SYNCED--> STABLE
       ^  ^                        |                               |                          |
       |  +------ JOIN_FAILED -----+-------------------------------+                          |
       +-- ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, POLL_TIMEOUT (from any of the four) ---------+
                                                                    STABLE --JOIN_SENT--> PREPARING_REBALANCE

    any of the four --LEAVE--> LEAVING --LEFT--> UNJOINED        (close, unsubscribe)
    any of the four, LEAVING --FENCED_INSTANCE_ID, FATAL_ERROR--> FAILED
    anything --CLOSE--> CLOSED

Rules:

- :func:`transition` is the whole behaviour: ``(state, event) -> Transition(new state,
  effects)``. The member applies the effects (see :class:`Effect`) and nothing else changes
  its state. A pair missing from the table is a bug in the member, and raises
  :class:`IllegalMemberTransitionError`.
- The events are what happened, not which request it came from: an ILLEGAL_GENERATION ends
  the generation whether JoinGroup, SyncGroup, Heartbeat or OffsetCommit said it.
  The state tells them apart where it matters: REBALANCE_IN_PROGRESS asks a STABLE member to
  join again, and means nothing to one whose JoinGroup or SyncGroup is in flight (that
  request answers for itself).
- Heartbeats go from JOINED until the generation ends or the member joins again (the
  coordinator counts a member whose JoinGroup it holds as alive).
- Partitions are *lost* (no commit; another member may own them already) when the
  generation ends: they are paused at once, and ``on_partitions_lost`` runs before the next
  JoinGroup. Revoking partitions (commit, then ``on_partitions_revoked``) is not an effect
  here: it happens before JOIN_SENT and while LEAVING, when the member still owns them.
- An answer can arrive after the member moved on (a Heartbeat sent in one generation,
  answered in the next). The member drops answers about a generation or member id it no
  longer has before they become events; the rows for stale answers that remain (an
  OffsetCommit answered while the next JoinGroup is in flight) are in the table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Effect",
    "IN_GROUP",
    "IllegalMemberTransitionError",
    "MemberEvent",
    "MemberState",
    "Transition",
    "TRANSITIONS",
    "transition",
]


class MemberState(enum.Enum):
    UNJOINED = "unjoined"  # in no generation, or a generation that is over
    PREPARING_REBALANCE = "preparing-rebalance"  # JoinGroup in flight
    COMPLETING_REBALANCE = "completing-rebalance"  # joined; SyncGroup in flight
    STABLE = "stable"  # has this generation's assignment
    LEAVING = "leaving"  # giving its partitions up and sending LeaveGroup
    FAILED = "failed"  # a fatal error went to the application; no more requests
    CLOSED = "closed"


class MemberEvent(enum.Enum):
    JOIN_SENT = "JoinGroup sent"
    JOINED = "JoinGroup answered: a member of the new generation"
    MEMBER_ID_REQUIRED = "JoinGroup answered MEMBER_ID_REQUIRED: join again with the member id given"
    SYNCED = "SyncGroup answered with this member's assignment"
    JOIN_FAILED = "JoinGroup or SyncGroup failed in a way a new join fixes (rebalance in progress, " \
                  "coordinator moved, timeout, connection lost)"
    REBALANCE_IN_PROGRESS = "the coordinator answered REBALANCE_IN_PROGRESS"
    ILLEGAL_GENERATION = "the coordinator answered ILLEGAL_GENERATION: the generation is over"
    UNKNOWN_MEMBER_ID = "the coordinator answered UNKNOWN_MEMBER_ID: the group forgot this member"
    FENCED_INSTANCE_ID = "the coordinator answered FENCED_INSTANCE_ID: another consumer has this instance id"
    FATAL_ERROR = "the coordinator answered an error no retry fixes"
    COORDINATOR_LOST = "the coordinator moved or went away (found again by the next request)"
    RETRIABLE_ERROR = "the coordinator answered an error the next heartbeat retries"
    POLL_TIMEOUT = "the application did not read for rebalance_timeout_ms (max.poll.interval.ms)"
    POLL_RESUMED = "the application reads again after its poll timeout"
    LEAVE = "the consumer closes or unsubscribes"
    LEFT = "partitions given up and LeaveGroup sent"
    CLOSE = "the consumer is closed"


class Effect(enum.Enum):
    RESET_GENERATION = "forget the generation (-1)"
    RESET_MEMBER_ID = "forget the member id: join as a new member"
    LOSE_PARTITIONS = "pause every owned partition now; on_partitions_lost before the next join"
    REQUEST_REJOIN = "join the group again"
    START_HEARTBEATS = "send heartbeats"
    STOP_HEARTBEATS = "send no heartbeats"
    LEAVE_GROUP = "send LeaveGroup now (a dynamic member) and forget the member id"
    FAIL = "hand the error to the application, and stop"


@dataclass(frozen=True, slots=True)
class Transition:
    state: MemberState
    effects: frozenset[Effect] = frozenset()


class IllegalMemberTransitionError(RuntimeError):
    """The member got an event its state has no transition for (a bug in the member)."""

    def __init__(self, state: MemberState, event: MemberEvent) -> None:
        super().__init__(f"group member in state {state.name} got {event.name} ({event.value}), which has no "
                         "transition in pulllog.client.member_state.TRANSITIONS; this is a bug, please report it")
        self.state = state
        self.event = event


S, E, F = MemberState, MemberEvent, Effect


def _t(state: MemberState, *effects: Effect) -> Transition:
    return Transition(state, frozenset(effects))


_GENERATION_OVER = (F.RESET_GENERATION, F.LOSE_PARTITIONS, F.STOP_HEARTBEATS, F.REQUEST_REJOIN)
_IN_GROUP = (S.UNJOINED, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE)
IN_GROUP = frozenset(_IN_GROUP)  # a subscribed member's states while it neither leaves nor has failed

TRANSITIONS: dict[tuple[MemberState, MemberEvent], Transition] = {
    # Joining: JoinGroup, then SyncGroup.
    (S.UNJOINED, E.JOIN_SENT): _t(S.PREPARING_REBALANCE, F.STOP_HEARTBEATS),
    (S.STABLE, E.JOIN_SENT): _t(S.PREPARING_REBALANCE, F.STOP_HEARTBEATS),
    (S.PREPARING_REBALANCE, E.JOINED): _t(S.COMPLETING_REBALANCE, F.START_HEARTBEATS),
    (S.PREPARING_REBALANCE, E.MEMBER_ID_REQUIRED): _t(S.UNJOINED, F.REQUEST_REJOIN),
    (S.COMPLETING_REBALANCE, E.SYNCED): _t(S.STABLE),
    (S.PREPARING_REBALANCE, E.JOIN_FAILED): _t(S.UNJOINED, F.STOP_HEARTBEATS, F.REQUEST_REJOIN),
    (S.COMPLETING_REBALANCE, E.JOIN_FAILED): _t(S.UNJOINED, F.STOP_HEARTBEATS, F.REQUEST_REJOIN),
    # REBALANCE_IN_PROGRESS: a stable member joins again; a join in flight answers for itself.
    (S.UNJOINED, E.REBALANCE_IN_PROGRESS): _t(S.UNJOINED, F.REQUEST_REJOIN),
    (S.PREPARING_REBALANCE, E.REBALANCE_IN_PROGRESS): _t(S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, E.REBALANCE_IN_PROGRESS): _t(S.COMPLETING_REBALANCE),
    (S.STABLE, E.REBALANCE_IN_PROGRESS): _t(S.STABLE, F.REQUEST_REJOIN),
    (S.LEAVING, E.REBALANCE_IN_PROGRESS): _t(S.LEAVING),
    # The generation is over (or the member forgotten): partitions lost, join again.
    **{(s, E.ILLEGAL_GENERATION): _t(S.UNJOINED, *_GENERATION_OVER) for s in _IN_GROUP},
    **{(s, E.UNKNOWN_MEMBER_ID): _t(S.UNJOINED, F.RESET_MEMBER_ID, *_GENERATION_OVER) for s in _IN_GROUP},
    (S.LEAVING, E.ILLEGAL_GENERATION): _t(S.LEAVING, F.RESET_GENERATION),
    (S.LEAVING, E.UNKNOWN_MEMBER_ID): _t(S.LEAVING, F.RESET_GENERATION, F.RESET_MEMBER_ID),
    # Fatal: the application gets the error; answers still in flight change nothing.
    **{(s, e): _t(S.FAILED, F.STOP_HEARTBEATS, F.FAIL)
       for s in (*_IN_GROUP, S.LEAVING) for e in (E.FENCED_INSTANCE_ID, E.FATAL_ERROR)},
    **{(S.FAILED, e): _t(S.FAILED) for e in (
        E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID, E.FATAL_ERROR,
        E.COORDINATOR_LOST, E.RETRIABLE_ERROR)},
    # The group client finds the coordinator again by itself; a retriable answer waits for the next try.
    **{(s, e): _t(s) for s in (*_IN_GROUP, S.LEAVING) for e in (E.COORDINATOR_LOST, E.RETRIABLE_ERROR)},
    # The application stopped reading: leave, and join again when it reads.
    **{(s, E.POLL_TIMEOUT): _t(S.UNJOINED, F.RESET_GENERATION, F.LOSE_PARTITIONS, F.STOP_HEARTBEATS, F.LEAVE_GROUP)
       for s in _IN_GROUP},
    **{(s, E.POLL_RESUMED): _t(s, F.REQUEST_REJOIN) for s in _IN_GROUP},
    # Leaving and closing.
    **{(s, E.LEAVE): _t(S.LEAVING, F.STOP_HEARTBEATS) for s in _IN_GROUP},
    (S.LEAVING, E.LEFT): _t(S.UNJOINED, F.RESET_GENERATION),
    **{(s, E.CLOSE): _t(S.CLOSED, F.STOP_HEARTBEATS) for s in MemberState},
}


def transition(state: MemberState, event: MemberEvent) -> Transition:
    """The table's answer for ``event`` in ``state``; raises IllegalMemberTransitionError
    for a pair it does not have."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalMemberTransitionError(state, event) from None
