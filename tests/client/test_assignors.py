"""Assignor properties: complete, disjoint, balanced within one; sticky where promised."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.client.assignors import cooperative_sticky, range_assign, roundrobin
from pulllog.net.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

topic_counts = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 24), min_size=1)
member_ids = st.lists(st.text("abcdefghij", min_size=1, max_size=6), min_size=1, max_size=9, unique=True)


def all_tps(partitions: dict[str, int]) -> set[tuple[str, int]]:
    return {(t, p) for t, n in partitions.items() for p in range(n)}


def check_complete_and_disjoint(result, partitions) -> None:
    assigned = [tp for tps in result.values() for tp in tps]
    assert len(assigned) == len(set(assigned)), "a partition has two owners"
    assert set(assigned) == all_tps(partitions), "a partition has no owner"


def test_range_is_the_papers_algorithm_1() -> None:
    subs = {m: Subscription(("t",)) for m in ["c1", "c0", "c2"]}
    result = range_assign(subs, {"t": 8})
    assert result == {"c0": [("t", 0), ("t", 1), ("t", 2)], "c1": [("t", 3), ("t", 4), ("t", 5)],
                      "c2": [("t", 6), ("t", 7)]}


@settings(max_examples=200, deadline=None)
@given(topic_counts, member_ids)
def test_range_and_roundrobin_are_complete_disjoint_and_balanced(partitions, members) -> None:
    subs = {m: Subscription(tuple(partitions)) for m in members}
    for assignor in (range_assign, roundrobin):
        result = assignor(subs, partitions)
        check_complete_and_disjoint(result, partitions)
    rr = roundrobin(subs, partitions)
    sizes = [len(v) for v in rr.values()]
    assert max(sizes) - min(sizes) <= 1
    for topic, n in partitions.items():  # range balances per topic
        per_topic = [sum(1 for t, _ in v if t == topic) for v in range_assign(subs, partitions).values()]
        assert max(per_topic) - min(per_topic) <= 1


@settings(max_examples=200, deadline=None)
@given(topic_counts, member_ids, st.data())
def test_sticky_keeps_owned_partitions_and_converges_without_double_ownership(partitions, members, data) -> None:
    # a previous generation, then some members leave and others join
    first = {m: Subscription(tuple(partitions)) for m in members}
    previous = cooperative_sticky(first, partitions)
    check_complete_and_disjoint(previous, partitions)
    stay = data.draw(st.lists(st.sampled_from(members), unique=True, min_size=1))
    joiners = data.draw(st.lists(st.text("klmnop", min_size=1, max_size=4), unique=True, max_size=3))
    subs = {m: Subscription(tuple(partitions), tuple(previous[m]), 1) for m in stay}
    subs.update({j: Subscription(tuple(partitions)) for j in joiners if j not in subs})
    round1 = cooperative_sticky(subs, partitions)
    assigned = [tp for tps in round1.values() for tp in tps]
    assert len(assigned) == len(set(assigned))
    for m in stay:  # nothing is taken from a member in the first round except to give away
        assert set(round1[m]) <= set(previous[m]) | (all_tps(partitions) - {tp for s in stay for tp in previous[s]})
    # members revoke what they lost and rejoin: the follow-up round completes the assignment
    subs2 = {m: Subscription(tuple(partitions), tuple(round1[m]), 2) for m in subs}
    round2 = cooperative_sticky(subs2, partitions)
    check_complete_and_disjoint(round2, partitions)
    sizes = [len(v) for v in round2.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in subs:  # sticky: what survived round one stays put
        assert set(round1[m]) <= set(round2[m])


def test_subscription_round_trips_through_kio() -> None:
    sub = Subscription(("b", "a"), (("a", 1), ("a", 0), ("b", 3)), 7, b"ud", None)
    for version in (0, 1, 2, 3):
        got = decode_subscription(encode_subscription(sub, version))
        assert got.topics == ("a", "b")
        if version >= 1:
            assert set(got.owned_partitions) == set(sub.owned_partitions)
        if version >= 2:
            assert got.generation_id == 7


def test_assignment_round_trips_and_junk_is_a_clear_error() -> None:
    a = Assignment((("t", 2), ("t", 0), ("u", 1)))
    assert set(decode_assignment(encode_assignment(a)).partitions) == set(a.partitions)
    assert decode_assignment(b"").partitions == ()
    import pytest

    with pytest.raises(ValueError):
        decode_subscription(b"\x00")
