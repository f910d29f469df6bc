"""The consumer's SubscriptionState, without a broker (pulllog.client.subscription_state)."""

from __future__ import annotations

import re

import pytest
from kio.schema.errors import ErrorCode

from pulllog.client.errors import KafkaError
from pulllog.client.subscription_state import SubscriptionSpec, SubscriptionState
from pulllog.client.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_assign_keeps_the_state_of_partitions_still_assigned_and_forgets_the_others() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([A0, A1])
    subs.seek(A0, 5)
    a0, a1 = subs.state(A0), subs.state(A1)
    subs.consumed(a1, 3)
    subs.reading = a1
    subs.set_error(a1, KafkaError(ErrorCode.corrupt_message))
    subs.assign_from_user([A0, B0])
    assert subs.assigned() == {A0, B0}
    assert subs.state(A0) is a0 and a0.position == 5
    assert not subs.owns(a1)
    assert subs.held == set() and subs.failed == set() and subs.reading is None


def test_a_partition_not_assigned_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="a-0 is not assigned to this consumer; assign"):
        SubscriptionState().state(A0)


def test_subscribe_and_assign_exclude_each_other() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([A0])
    with pytest.raises(ValueError, match=r"assign\(\[\]\) first"):
        subs.subscribe(SubscriptionSpec.parse(["a"]))
    subs.assign_from_user([])
    subs.subscribe(SubscriptionSpec.parse(["a"]))
    with pytest.raises(ValueError, match="unsubscribe"):
        subs.assign_from_user([A0])


def test_a_pattern_subscription_is_evaluated_against_the_topics_given() -> None:
    subs = SubscriptionState()
    subs.subscribe(SubscriptionSpec.parse(["fixed", re.compile("^ev-")]))
    assert subs.subscribed_topics == {"fixed"}
    assert subs.match_topics(["ev-1", "other", "fixed"])
    assert subs.subscribed_topics == {"ev-1", "fixed"}
    assert not subs.match_topics(["fixed", "ev-1"])  # unchanged
    subs.unsubscribe()
    assert not subs.subscribed and subs.subscribed_topics == frozenset()


def test_a_seek_voids_what_is_buffered_and_in_flight_and_clears_the_error() -> None:
    subs = SubscriptionState()
    woken = []
    subs.add_listener(lambda: woken.append(1))
    subs.assign_from_user([A0])
    state = subs.state(A0)
    assert state.needs_reset
    epoch = state.epoch
    subs.set_error(state, KafkaError(ErrorCode.corrupt_message))
    subs.seek(A0, 7)
    assert (state.position, state.fetch_offset, state.processed) == (7, 7, 7)
    assert state.epoch == epoch + 1 and state.error is None and not subs.failed
    assert not state.needs_reset
    assert len(woken) == 2  # the assign and the seek wake the fetcher


def test_records_handed_out_count_as_processed_only_when_the_application_comes_back() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([A0, A1])
    a0, a1 = subs.state(A0), subs.state(A1)
    subs.move(a0, 0)
    subs.move(a1, 0)
    subs.consumed(a0, 10)
    subs.consumed(a1, 4)
    assert subs.processed([A0, A1]) == {A0: 0, A1: 0}
    assert subs.holds_any({A0})
    subs.ack(frozenset({A0}))
    assert subs.processed([A0, A1]) == {A0: 10, A1: 0}
    assert not subs.holds_any({A0}) and subs.holds_any({A1})
    subs.ack()
    assert subs.processed([A0, A1]) == {A0: 10, A1: 4}
    assert subs.positions() == {A0: 10, A1: 4}


def test_the_group_adds_unpauses_pauses_and_removes_partitions() -> None:
    subs = SubscriptionState()
    subs.subscribe(SubscriptionSpec.parse(["a"]))
    subs.assign_from_group({A0, A1})
    subs.pause({A0})
    assert subs.state(A0).paused and not subs.state(A1).paused
    subs.assign_from_group({A0})
    assert not subs.state(A0).paused
    a1 = subs.state(A1)
    subs.consumed(a1, 2)
    subs.remove({A1})
    assert subs.assigned() == {A0} and a1 not in subs.held


def test_out_of_range_resets_per_auto_offset_reset_not_to_the_committed_offset() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([A0])
    state = subs.state(A0)
    subs.move(state, 100)
    subs.reset_after_out_of_range(state)
    assert state.needs_reset and not state.use_committed
