"""The group member's state table, walked without a broker (pulllog.client.member_state)."""

from __future__ import annotations

import pytest

from pulllog.client.member_state import (
    IN_GROUP,
    TRANSITIONS,
    Effect,
    IllegalMemberTransitionError,
    MemberEvent,
    MemberState,
    transition,
)

S, E, F = MemberState, MemberEvent, Effect


def walk(state: MemberState, *events: MemberEvent) -> tuple[MemberState, list[frozenset[Effect]]]:
    effects = []
    for event in events:
        t = transition(state, event)
        state = t.state
        effects.append(t.effects)
    return state, effects


def test_a_join_goes_through_preparing_and_completing_to_stable_with_heartbeats_from_the_join_answer() -> None:
    state, effects = walk(S.UNJOINED, E.JOIN_SENT, E.JOINED, E.SYNCED)
    assert state is S.STABLE
    assert effects == [frozenset({F.STOP_HEARTBEATS}), frozenset({F.START_HEARTBEATS}), frozenset()]


def test_member_id_required_sends_the_member_back_to_join_at_once() -> None:
    state, effects = walk(S.UNJOINED, E.JOIN_SENT, E.MEMBER_ID_REQUIRED)
    assert state is S.UNJOINED
    assert effects[-1] == {F.REQUEST_REJOIN}


def test_rebalance_in_progress_makes_a_stable_member_rejoin_without_losing_its_generation() -> None:
    t = transition(S.STABLE, E.REBALANCE_IN_PROGRESS)
    assert t.state is S.STABLE
    assert t.effects == {F.REQUEST_REJOIN}


@pytest.mark.parametrize("state", [S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE])
def test_rebalance_in_progress_from_a_heartbeat_changes_nothing_while_a_join_is_in_flight(state: MemberState) -> None:
    assert transition(state, E.REBALANCE_IN_PROGRESS).state is state
    assert transition(state, E.REBALANCE_IN_PROGRESS).effects == frozenset()


@pytest.mark.parametrize("state", [S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE])
def test_a_failed_join_or_sync_stops_heartbeats_and_joins_again_keeping_the_generation(state: MemberState) -> None:
    t = transition(state, E.JOIN_FAILED)
    assert t.state is S.UNJOINED
    assert t.effects == {F.STOP_HEARTBEATS, F.REQUEST_REJOIN}


@pytest.mark.parametrize("state", sorted(IN_GROUP, key=lambda s: s.value))
def test_illegal_generation_ends_the_generation_and_loses_the_partitions_from_every_group_state(
        state: MemberState) -> None:
    t = transition(state, E.ILLEGAL_GENERATION)
    assert t.state is S.UNJOINED
    assert t.effects == {F.RESET_GENERATION, F.LOSE_PARTITIONS, F.STOP_HEARTBEATS, F.REQUEST_REJOIN}


@pytest.mark.parametrize("state", sorted(IN_GROUP, key=lambda s: s.value))
def test_unknown_member_id_also_forgets_the_member_id(state: MemberState) -> None:
    t = transition(state, E.UNKNOWN_MEMBER_ID)
    assert t.state is S.UNJOINED
    assert F.RESET_MEMBER_ID in t.effects and F.RESET_GENERATION in t.effects and F.LOSE_PARTITIONS in t.effects


@pytest.mark.parametrize("event", [E.FENCED_INSTANCE_ID, E.FATAL_ERROR])
@pytest.mark.parametrize("state", [*sorted(IN_GROUP, key=lambda s: s.value), S.LEAVING])
def test_a_fatal_answer_fails_the_member_and_hands_the_error_to_the_application(
        state: MemberState, event: MemberEvent) -> None:
    t = transition(state, event)
    assert t.state is S.FAILED
    assert F.FAIL in t.effects and F.STOP_HEARTBEATS in t.effects


def test_a_failed_member_ignores_answers_still_in_flight_and_can_only_close() -> None:
    for event in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID,
                  E.COORDINATOR_LOST):
        assert transition(S.FAILED, event) == transition(S.FAILED, E.COORDINATOR_LOST)
        assert transition(S.FAILED, event).state is S.FAILED
        assert not transition(S.FAILED, event).effects
    for event in (E.JOIN_SENT, E.LEAVE, E.POLL_TIMEOUT):
        with pytest.raises(IllegalMemberTransitionError):
            transition(S.FAILED, event)
    assert transition(S.FAILED, E.CLOSE).state is S.CLOSED


def test_a_poll_timeout_leaves_the_group_and_the_next_read_joins_again() -> None:
    state, effects = walk(S.STABLE, E.POLL_TIMEOUT, E.POLL_RESUMED, E.JOIN_SENT)
    assert state is S.PREPARING_REBALANCE
    assert effects[0] == {F.RESET_GENERATION, F.LOSE_PARTITIONS, F.STOP_HEARTBEATS, F.LEAVE_GROUP}
    assert effects[1] == {F.REQUEST_REJOIN}


def test_leaving_stops_heartbeats_ends_unjoined_and_a_new_subscription_joins_again() -> None:
    state, effects = walk(S.STABLE, E.LEAVE, E.ILLEGAL_GENERATION, E.LEFT, E.JOIN_SENT)
    assert state is S.PREPARING_REBALANCE
    assert effects[0] == {F.STOP_HEARTBEATS}
    assert effects[1] == {F.RESET_GENERATION}  # an OffsetCommit on the way out: no rejoin, nothing lost twice
    assert effects[2] == {F.RESET_GENERATION}


def test_coordinator_loss_and_retriable_answers_leave_the_state_alone() -> None:
    for state in (*IN_GROUP, S.LEAVING):
        for event in (E.COORDINATOR_LOST, E.RETRIABLE_ERROR):
            assert transition(state, event).state is state
            assert not transition(state, event).effects


def test_every_state_closes_and_a_closed_member_takes_no_other_event() -> None:
    for state in MemberState:
        assert transition(state, E.CLOSE).state is S.CLOSED
    for event in MemberEvent:
        if event is not E.CLOSE:
            with pytest.raises(IllegalMemberTransitionError, match="CLOSED got"):
                transition(S.CLOSED, event)


@pytest.mark.parametrize(("state", "event"), [
    (S.UNJOINED, E.JOINED),  # an answer to a JoinGroup never sent
    (S.UNJOINED, E.SYNCED),
    (S.PREPARING_REBALANCE, E.SYNCED),
    (S.STABLE, E.JOINED),
    (S.STABLE, E.LEFT),
    (S.LEAVING, E.JOIN_SENT),
])
def test_an_illegal_pair_raises_one_error_naming_the_state_and_the_event(
        state: MemberState, event: MemberEvent) -> None:
    assert (state, event) not in TRANSITIONS
    with pytest.raises(IllegalMemberTransitionError) as info:
        transition(state, event)
    assert info.value.state is state and info.value.event is event
    assert state.name in str(info.value) and event.name in str(info.value)


def test_heartbeats_go_exactly_between_the_join_answer_and_the_end_of_the_generation() -> None:
    """Replay the table's heartbeat effects along a member's life; heartbeats are on exactly
    in COMPLETING_REBALANCE and STABLE."""
    on = False
    state = S.UNJOINED
    life = [E.JOIN_SENT, E.JOINED, E.SYNCED, E.REBALANCE_IN_PROGRESS, E.JOIN_SENT, E.JOINED, E.JOIN_FAILED,
            E.JOIN_SENT, E.JOINED, E.SYNCED, E.ILLEGAL_GENERATION, E.JOIN_SENT, E.JOINED, E.SYNCED,
            E.POLL_TIMEOUT, E.POLL_RESUMED, E.JOIN_SENT, E.JOINED, E.SYNCED, E.LEAVE, E.LEFT, E.CLOSE]
    for event in life:
        t = transition(state, event)
        if F.START_HEARTBEATS in t.effects:
            on = True
        if F.STOP_HEARTBEATS in t.effects:
            on = False
        state = t.state
        assert on == (state in (S.COMPLETING_REBALANCE, S.STABLE)), (event, state)
    assert state is S.CLOSED
