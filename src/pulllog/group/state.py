"""The consumer group state machine, in one table (after h11's ``_state.py``).

States (Kafka's names)::

    Empty                no members; committed offsets may still exist
    PreparingRebalance   a join started a rebalance: waiting for members to (re)join
    CompletingRebalance  joins done, generation bumped: waiting for the leader's SyncGroup
    Stable               assignment handed out; members heartbeat
    Dead                 deleted (DeleteGroups, or expired with nothing left): no longer served

Rules:

* Any change of membership in Empty, Stable or CompletingRebalance starts a rebalance:
  -> PreparingRebalance. A rebalance already in progress absorbs further joins.
* PreparingRebalance ends when every known member has rejoined, or at the rebalance timeout
  (members that did not rejoin are dropped): -> CompletingRebalance, or -> Empty when no
  member is left.
* CompletingRebalance ends with the leader's SyncGroup: -> Stable. A member leaving or
  timing out first sends the group back to PreparingRebalance.
* The last member leaving: -> Empty. Deleting an Empty group: -> Dead.

A transition missing from the table is a bug in the coordinator and raises
IllegalTransitionError, naming the state and the event.
"""

from __future__ import annotations

import enum

__all__ = ["Event", "GroupState", "IllegalTransitionError", "next_state"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Event(enum.Enum):
    REBALANCE = "a member joined, left, changed or timed out"
    JOIN_COMPLETE = "every member rejoined (or the rebalance timeout passed)"
    ALL_MEMBERS_GONE = "no member is left"
    SYNC_COMPLETE = "the leader's SyncGroup arrived"
    DELETE = "the group was deleted"


class IllegalTransitionError(RuntimeError):
    def __init__(self, state: GroupState, event: Event) -> None:
        super().__init__(f"a group in state {state.value} cannot take the event: {event.value}")
        self.state, self.event = state, event


S, E = GroupState, Event

_TRANSITIONS: dict[tuple[GroupState, Event], GroupState] = {
    (S.EMPTY, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.EMPTY, E.ALL_MEMBERS_GONE): S.EMPTY,
    (S.EMPTY, E.DELETE): S.DEAD,
    (S.PREPARING_REBALANCE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETE): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.ALL_MEMBERS_GONE): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.SYNC_COMPLETE): S.STABLE,
    (S.COMPLETING_REBALANCE, E.ALL_MEMBERS_GONE): S.EMPTY,
    (S.STABLE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.STABLE, E.ALL_MEMBERS_GONE): S.EMPTY,
    (S.DEAD, E.DELETE): S.DEAD,
}


def next_state(state: GroupState, event: Event) -> GroupState:
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransitionError(state, event) from None
