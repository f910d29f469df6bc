"""The group coordinator at the protocol level: exact requests, exact answers.

Each test drives a real broker with :class:`WireClient` (a blocking Kafka-protocol client
that sends what it is told), playing the members itself: JoinGroup, SyncGroup, Heartbeat,
OffsetCommit as a consumer would, in the versions librdkafka (JoinGroup v5) and the Java
client (v9) send. A JoinGroup is answered only when the join phase ends, so members that
must join together join from threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from group_helpers import (
    SESSION_TIMEOUT_MS,
    TIMEOUT_S,
    assignment,
    create_topic,
    subscription,
)
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import (
    awaiting_join,
    block_until,
    expired_group_timers,
    group_generation,
    group_members,
    group_state,
)

from pulllog.testing import BrokerThread

TOPIC = "orders"


def in_background(fn: Callable[[], Any]) -> Future[Any]:
    """Run a blocking call (a JoinGroup that waits for the others) in a daemon thread."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class WireMember:
    """One consumer group member, speaking the classic group protocol by hand."""

    def __init__(self, port: int, group_id: str, client_id: str = "wire-member", *,
                 instance_id: str | None = None, topics: tuple[str, ...] = (TOPIC,), join_version: int = 5,
                 rebalance_timeout_ms: int = 30000) -> None:
        self.client = WireClient(port, timeout=TIMEOUT_S, client_id=client_id)
        self.group_id, self.instance_id, self.topics = group_id, instance_id, topics
        self.join_version, self.rebalance_timeout_ms = join_version, rebalance_timeout_ms
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list[Any] = []

    def close(self) -> None:
        self.client.close()

    def join(self) -> Any:
        """JoinGroup until answered (a new dynamic member is first told its member id)."""
        while True:
            response = self.client.call("join_group", self.join_version, {
                "group_id": self.group_id, "session_timeout": SESSION_TIMEOUT_MS,
                "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id, "group_instance_id": self.instance_id, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(*self.topics)}], "reason": None,
            })
            if response.error_code == ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            assert response.error_code == ErrorCode.none, response
            self.member_id, self.generation, self.leader = response.member_id, response.generation_id, response.leader
            self.members = list(response.members)
            return response

    def sync(self, assignments: dict[str, bytes] | None = None) -> Any:
        return self.client.call("sync_group", 3, {
            "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        })

    def heartbeat(self) -> ErrorCode:
        return self.client.call("heartbeat", 3, {
            "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id}).error_code

    def commit(self, offsets: dict[tuple[str, int], tuple[int, str | None]], *, generation: int | None = None) -> dict[tuple[str, int], ErrorCode]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": metadata})
        response = self.client.call("offset_commit", 8, {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": self.generation if generation is None else generation,
            "member_id": self.member_id, "group_instance_id": self.instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def join_together(*members: WireMember) -> None:
    futures = [in_background(m.join) for m in members]
    for f in futures:
        f.result(TIMEOUT_S)


def lead_sync(leader: WireMember, others: list[WireMember], assignments: dict[str, bytes]) -> dict[str, bytes]:
    """The leader hands in the assignment while the others wait in SyncGroup; returns what
    each member was given."""
    waiting = {m.member_id: in_background(m.sync) for m in others}
    answers = {leader.member_id: leader.sync(assignments)}
    for member_id, f in waiting.items():
        answers[member_id] = f.result(TIMEOUT_S)
    for answer in answers.values():
        assert answer.error_code == ErrorCode.none, answer
    return {m: bytes(a.assignment) for m, a in answers.items()}


def stable_group(port: int, group_id: str, client_ids: list[str], *, instance_ids: list[str | None] | None = None,
                 join_version: int = 5, rebalance_timeout_ms: int = 30000) -> tuple[list[WireMember], dict[str, bytes]]:
    """Members that joined one generation together and got their assignments (partition i of
    TOPIC to member i)."""
    instance_ids = instance_ids or [None] * len(client_ids)
    members = [WireMember(port, group_id, c, instance_id=i, join_version=join_version,
                          rebalance_timeout_ms=rebalance_timeout_ms)
               for c, i in zip(client_ids, instance_ids)]
    members[0].join()
    for n, newcomer in enumerate(members[1:], start=1):
        # One at a time, as a rebalance goes: the newcomer's join waits until the members
        # already in the group learn of it (heartbeat) and rejoin.
        joined = in_background(newcomer.join)
        wait_for_rebalance(members[0])
        join_together(*members[:n])
        joined.result(TIMEOUT_S)
    assert len({m.generation for m in members}) == 1
    leader = next(m for m in members if m.member_id == m.leader)
    plan = {m.member_id: assignment({TOPIC: [i]}) for i, m in enumerate(members)}
    given = lead_sync(leader, [m for m in members if m is not leader], plan)
    assert given == plan
    return members, plan


def wait_for_rebalance(member: WireMember) -> None:
    """Heartbeat (which keeps the member in the group) until it is told to rejoin."""
    def told_to_rejoin() -> bool:
        error = member.heartbeat()
        assert error in (ErrorCode.none, ErrorCode.rebalance_in_progress), error
        return error == ErrorCode.rebalance_in_progress
    block_until(told_to_rejoin, f"{member.client.client_id} is told a rebalance started", interval_s=0.02)


def list_groups(client: WireClient, states: list[str] | None = None) -> dict[str, tuple[str, str]]:
    response = client.call("list_groups", 4, {"states_filter": states or []})
    assert response.error_code == ErrorCode.none
    return {g.group_id: (g.group_state, g.protocol_type) for g in response.groups}


def describe(client: WireClient, group_id: str) -> Any:
    (group,) = client.call("describe_groups", 5, {"groups": [group_id], "include_authorized_operations": False}).groups
    return group


def fetch_offsets(client: WireClient, group_id: str, wanted: list[tuple[str, int]] | None) -> dict[tuple[str, int], tuple[int, str | None]]:
    topics = None
    if wanted is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in wanted:
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    response = client.call("offset_fetch", 7, {"group_id": group_id, "topics": topics, "require_stable": False})
    assert response.error_code == ErrorCode.none
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions}


def simple_commit(client: WireClient, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """A commit by a consumer that does not use group membership (generation -1, no member id)."""
    response = client.call("offset_commit", 8, {
        "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                               "committed_leader_epoch": -1, "committed_metadata": None}]}
                   for (t, p), o in offsets.items()]})
    assert all(p.error_code == ErrorCode.none for t in response.topics for p in t.partitions), response


@pytest.fixture
def port(pulllog_broker: Any) -> int:
    create_topic(pulllog_broker.bootstrap_servers, TOPIC, 3)
    return int(pulllog_broker.port)


# ---------------------------------------------------------------------------- joining


def test_a_new_member_is_told_its_member_id_then_leads_generation_one(port: int) -> None:
    with WireClient(port) as client:
        first = client.call("join_group", 5, {
            "group_id": "g", "session_timeout": SESSION_TIMEOUT_MS, "rebalance_timeout": 30000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(TOPIC)}]})
        assert first.error_code == ErrorCode.member_id_required
        assert first.member_id
    member = WireMember(port, "g")
    member.member_id = first.member_id
    answer = member.join()
    assert (answer.member_id, answer.generation_id, answer.leader) == (first.member_id, 1, first.member_id)
    assert answer.protocol_name == "range"
    assert [(m.member_id, bytes(m.metadata)) for m in answer.members] == [(first.member_id, subscription(TOPIC))]


def test_a_join_is_answered_once_every_known_member_has_rejoined(pulllog_broker: Any, port: int) -> None:
    (a, b), _ = stable_group(port, "g", ["a", "b"])
    before = a.generation
    c = WireMember(port, "g", "c")
    c_joined = in_background(c.join)
    # a and b learn of the rebalance from their heartbeats, and the join waits for them.
    wait_for_rebalance(a)
    assert b.heartbeat() == ErrorCode.rebalance_in_progress
    block_until(lambda: awaiting_join(pulllog_broker, "g") == 1, "the coordinator holds c's JoinGroup")
    assert not c_joined.done()
    a_joined = in_background(a.join)
    block_until(lambda: awaiting_join(pulllog_broker, "g") == 2, "the coordinator holds a's JoinGroup too")
    assert group_state(pulllog_broker, "g") == "PreparingRebalance"  # b has not rejoined yet
    assert not c_joined.done() and not a_joined.done()
    b.join()
    c_joined.result(TIMEOUT_S)
    a_joined.result(TIMEOUT_S)
    assert a.generation == b.generation == c.generation == before + 1
    assert a.leader == b.leader == c.leader
    leader = next(m for m in (a, b, c) if m.member_id == m.leader)
    assert {m.member_id for m in leader.members} == {a.member_id, b.member_id, c.member_id}


def test_a_member_told_its_id_that_never_comes_back_does_not_hold_up_the_next_rebalance(port: int) -> None:
    # A consumer that crashes right after MEMBER_ID_REQUIRED is forgotten after its session
    # timeout, as Kafka does; the join does not wait for it until the rebalance timeout.
    (a,), _ = stable_group(port, "g", ["a"], rebalance_timeout_ms=120_000)
    with WireClient(port) as client:
        ghost = client.call("join_group", 5, {
            "group_id": "g", "session_timeout": SESSION_TIMEOUT_MS, "rebalance_timeout": 120_000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(TOPIC)}]})
        assert ghost.error_code == ErrorCode.member_id_required
    b = WireMember(port, "g", "b", rebalance_timeout_ms=120_000)
    b_joined = in_background(b.join)
    wait_for_rebalance(a)
    a.join()
    b_joined.result(TIMEOUT_S)  # TIMEOUT_S is half the rebalance timeout: the join did not wait for it
    assert a.generation == b.generation
    leader = a if a.member_id == a.leader else b
    assert {m.member_id for m in leader.members} == {a.member_id, b.member_id}


def test_the_initial_rebalance_delay_lets_members_starting_together_share_the_first_generation(tmp_path: Any) -> None:
    with BrokerThread(tmp_path / "data", properties={"group.initial.rebalance.delay.ms": "1500"}) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        a, b = WireMember(broker.port, "g", "a"), WireMember(broker.port, "g", "b")
        a_joined = in_background(a.join)
        # The delay holds a's join (no generation yet); b joins within it, which extends it.
        block_until(lambda: awaiting_join(broker, "g") == 1, "the coordinator holds a's JoinGroup")
        assert group_generation(broker, "g") == 0
        b.join()
        a_joined.result(TIMEOUT_S)
    # Without the delay a would have had generation 1 alone and b's join made generation 2.
    assert a.generation == b.generation == 1
    leader = a if a.member_id == a.leader else b
    assert {m.member_id for m in leader.members} == {a.member_id, b.member_id}


def test_a_heartbeat_from_an_older_generation_is_illegal_generation_even_during_a_rebalance(port: int) -> None:
    # Kafka checks the generation before the group's state: a member still on an older
    # generation must rejoin (ILLEGAL_GENERATION), while one on the current generation is
    # told a rebalance is under way.
    (a, b), _ = stable_group(port, "g", ["a", "b"])
    in_background(WireMember(port, "g", "c").join)
    wait_for_rebalance(a)
    stale = WireMember(port, "g", "b-stale")
    stale.member_id, stale.generation = b.member_id, b.generation - 1
    try:
        assert stale.heartbeat() == ErrorCode.illegal_generation
        assert b.heartbeat() == ErrorCode.rebalance_in_progress
    finally:
        stale.close()


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(pulllog_broker: Any, port: int) -> None:
    (a, b), _ = stable_group(port, "g", ["a", "b"])
    expired_before = expired_group_timers(pulllog_broker)
    b.close()  # b goes silent: no LeaveGroup, no heartbeat
    wait_for_rebalance(a)  # a keeps heartbeating meanwhile, so only b's session can run out
    # b was removed by its session timer (the rebalance purgatory), not by anything else.
    assert expired_group_timers(pulllog_broker) == expired_before + 1
    assert group_members(pulllog_broker, "g") == 1
    before = a.generation
    a.join()
    assert a.generation == before + 1
    assert [m.member_id for m in a.members] == [a.member_id]


# ---------------------------------------------------------------------------- admin views


def test_list_groups_shows_every_group_with_its_state(port: int) -> None:
    stable_group(port, "stable", ["s"])
    just_joined = WireMember(port, "just-joined", "j")
    just_joined.join()  # joined, not synced yet
    stable_group(port, "preparing", ["old"])
    newcomer = WireMember(port, "preparing", "new")
    in_background(newcomer.join)  # waits for "old" to rejoin
    with WireClient(port) as client:
        simple_commit(client, "offsets-only", {(TOPIC, 0): 5})
        groups = wait_for_state(client, "preparing", "PreparingRebalance")
        assert groups == {
            "stable": ("Stable", "consumer"),
            "just-joined": ("CompletingRebalance", "consumer"),
            "preparing": ("PreparingRebalance", "consumer"),
            "offsets-only": ("Empty", ""),
        }
        assert list_groups(client, ["Stable", "Empty"]) == {"stable": ("Stable", "consumer"),
                                                           "offsets-only": ("Empty", "")}


def wait_for_state(client: WireClient, group_id: str, state: str) -> dict[str, tuple[str, str]]:
    """ListGroups until it shows ``group_id`` in ``state``; returns that listing."""
    return block_until(lambda: (groups := list_groups(client))[group_id][0] == state and groups,
                       f"ListGroups shows {group_id} {state}")


def test_describe_groups_shows_members_with_client_ids_hosts_and_assignments(port: int) -> None:
    members, plan = stable_group(port, "g", ["billing-1", "billing-2"])
    with WireClient(port) as client:
        group = describe(client, "g")
    assert group.error_code == ErrorCode.none
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
    described = {m.member_id: (m.client_id, m.client_host, bytes(m.member_metadata), bytes(m.member_assignment))
                 for m in group.members}
    assert described == {
        members[0].member_id: ("billing-1", "/127.0.0.1", subscription(TOPIC), plan[members[0].member_id]),
        members[1].member_id: ("billing-2", "/127.0.0.1", subscription(TOPIC), plan[members[1].member_id]),
    }


def test_describe_groups_leaves_out_protocol_metadata_and_assignments_while_rebalancing(port: int) -> None:
    (a,), _ = stable_group(port, "g", ["a"])
    in_background(WireMember(port, "g", "b").join)
    wait_for_rebalance(a)
    with WireClient(port) as client:
        group = describe(client, "g")
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("PreparingRebalance", "consumer", "")
    assert a.member_id in {m.member_id for m in group.members}
    assert {(bytes(m.member_metadata), bytes(m.member_assignment)) for m in group.members} == {(b"", b"")}


def test_describe_groups_answers_an_unknown_group_as_dead(port: int) -> None:
    with WireClient(port) as client:
        group = describe(client, "nobody-here")
    assert (group.error_code, group.group_state, list(group.members)) == (ErrorCode.none, "Dead", [])


# ---------------------------------------------------------------------------- committed offsets


def test_committed_offset_metadata_strings_round_trip(port: int) -> None:
    (member,), _ = stable_group(port, "g", ["m"])
    committed = {(TOPIC, 0): (10, "checkpoint=alpha"), (TOPIC, 1): (20, ""), (TOPIC, 2): (30, "ünïcødé ✓ " * 20)}
    assert set(member.commit(committed).values()) == {ErrorCode.none}
    with WireClient(port) as client:
        assert fetch_offsets(client, "g", [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]) == committed
        assert fetch_offsets(client, "g", None) == committed  # null topics: everything committed
        # OffsetFetch v8 asks for several groups at once
        response = client.call("offset_fetch", 8, {"groups": [
            {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [2]}]},
            {"group_id": "never-committed", "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
            "require_stable": False})
    answers = {g.group_id: [(p.partition_index, p.committed_offset, p.metadata) for t in g.topics for p in t.partitions]
               for g in response.groups}
    assert answers == {"g": [(2, 30, "ünïcødé ✓ " * 20)], "never-committed": [(0, -1, "")]}


def test_offset_metadata_over_the_limit_is_refused_and_the_rest_is_committed(port: int) -> None:
    (member,), _ = stable_group(port, "g", ["m"])
    errors = member.commit({(TOPIC, 0): (1, "x" * 5000), (TOPIC, 1): (2, "fine")})
    assert errors == {(TOPIC, 0): ErrorCode.offset_metadata_too_large, (TOPIC, 1): ErrorCode.none}
    with WireClient(port) as client:
        assert fetch_offsets(client, "g", [(TOPIC, 0), (TOPIC, 1)]) == {(TOPIC, 0): (-1, ""), (TOPIC, 1): (2, "fine")}


def test_a_member_commits_while_the_group_prepares_a_rebalance_but_not_before_its_new_assignment(port: int) -> None:
    # On a rebalance a consumer commits what it processed before it gives its partitions up
    # (commit on revoke): the group is preparing the rebalance, the member's generation still
    # current. Once the join is answered (a new generation) and before the assignment arrives,
    # the member owns nothing, so a commit is REBALANCE_IN_PROGRESS.
    (a,), _ = stable_group(port, "g", ["a"])
    b = WireMember(port, "g", "b")
    b_joined = in_background(b.join)
    wait_for_rebalance(a)
    assert a.commit({(TOPIC, 0): (7, "on revoke")}) == {(TOPIC, 0): ErrorCode.none}
    a.join()
    b_joined.result(TIMEOUT_S)
    assert a.commit({(TOPIC, 0): (8, None)}) == {(TOPIC, 0): ErrorCode.rebalance_in_progress}
    assert a.commit({(TOPIC, 0): (8, None)}, generation=a.generation - 1) == {(TOPIC, 0): ErrorCode.illegal_generation}
    leader, other = (a, b) if a.member_id == a.leader else (b, a)
    lead_sync(leader, [other], {a.member_id: assignment({TOPIC: [0]}), b.member_id: assignment({TOPIC: [1, 2]})})
    assert a.commit({(TOPIC, 0): (9, None)}) == {(TOPIC, 0): ErrorCode.none}
    with WireClient(port) as client:
        assert fetch_offsets(client, "g", [(TOPIC, 0)]) == {(TOPIC, 0): (9, "")}


def test_a_simple_commit_into_a_group_with_members_is_refused(port: int) -> None:
    stable_group(port, "g", ["m"])
    with WireClient(port) as client:
        response = client.call("offset_commit", 8, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id
        assert fetch_offsets(client, "g", [(TOPIC, 0)]) == {(TOPIC, 0): (-1, "")}


# ---------------------------------------------------------------------------- deleting


def test_delete_groups_answers_non_empty_group_and_group_id_not_found(port: int) -> None:
    stable_group(port, "busy", ["m"])
    with WireClient(port) as client:
        simple_commit(client, "idle", {(TOPIC, 0): 3})
        response = client.call("delete_groups", 2, {"groups_names": ["busy", "unknown", "idle"]})
        assert {r.group_id: r.error_code for r in response.results} == {
            "busy": ErrorCode.non_empty_group, "unknown": ErrorCode.group_id_not_found, "idle": ErrorCode.none}
        assert set(list_groups(client)) == {"busy"}
        assert fetch_offsets(client, "idle", [(TOPIC, 0)]) == {(TOPIC, 0): (-1, "")}


def test_offset_delete_removes_the_offsets_of_a_topic_the_group_does_not_consume(port: int, pulllog_broker: Any) -> None:
    create_topic(pulllog_broker.bootstrap_servers, "retired", 2)  # offsets of a missing topic are refused
    (member,), _ = stable_group(port, "g", ["m"])
    assert set(member.commit({(TOPIC, 0): (4, None), ("retired", 0): (9, None), ("retired", 1): (9, None)}).values()) == {ErrorCode.none}
    with WireClient(port) as client:
        response = client.call("offset_delete", 0, {"group_id": "g", "topics": [
            {"name": "retired", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]})
        assert response.error_code == ErrorCode.none
        assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.none, ErrorCode.none]
        assert fetch_offsets(client, "g", None) == {(TOPIC, 0): (4, "")}


def test_offset_delete_refuses_a_topic_the_group_consumes(port: int) -> None:
    (member,), _ = stable_group(port, "g", ["m"])
    member.commit({(TOPIC, 0): (4, None)})
    with WireClient(port) as client:
        response = client.call("offset_delete", 0, {"group_id": "g", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.group_subscribed_to_topic]
        assert fetch_offsets(client, "g", None) == {(TOPIC, 0): (4, "")}
        unknown = client.call("offset_delete", 0, {"group_id": "unknown", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert unknown.error_code == ErrorCode.group_id_not_found


# ---------------------------------------------------------------------------- static membership


def test_a_static_member_restarting_within_its_session_timeout_gets_its_assignment_back_without_a_rebalance(port: int) -> None:
    (s1, s2), plan = stable_group(port, "g", ["app", "app"], instance_ids=["host-1", "host-2"])
    generation = s2.generation
    s2.close()  # the process restarts: a new connection, no member id, the same instance id
    restarted = WireMember(port, "g", "app", instance_id="host-2")
    answer = restarted.join()
    assert answer.generation_id == generation
    assert restarted.member_id != s2.member_id
    synced = restarted.sync()
    assert (synced.error_code, bytes(synced.assignment)) == (ErrorCode.none, plan[s2.member_id])
    assert s1.heartbeat() == ErrorCode.none  # no rebalance for the others
    with WireClient(port) as client:
        group = describe(client, "g")
    assert group.group_state == "Stable"
    assert {m.group_instance_id: bytes(m.member_assignment) for m in group.members} == {
        "host-1": plan[s1.member_id], "host-2": plan[s2.member_id]}


def test_the_replaced_incarnation_of_a_static_member_is_fenced(port: int) -> None:
    (_s1, s2), _ = stable_group(port, "g", ["app", "app"], instance_ids=["host-1", "host-2"])
    WireMember(port, "g", "app", instance_id="host-2").join()  # a new incarnation took host-2's place
    # The old one is a zombie: it must stop (FENCED_INSTANCE_ID), not rejoin and fight.
    assert s2.heartbeat() == ErrorCode.fenced_instance_id
    assert s2.sync().error_code == ErrorCode.fenced_instance_id
    assert s2.commit({(TOPIC, 0): (1, None)}) == {(TOPIC, 0): ErrorCode.fenced_instance_id}


@pytest.mark.parametrize("join_version", [5, 9])
def test_a_restarted_static_leader_is_not_asked_to_assign_again(port: int, join_version: int) -> None:
    members, plan = stable_group(port, "g", ["app", "app"], instance_ids=["host-1", "host-2"], join_version=join_version)
    old_leader = next(m for m in members if m.member_id == m.leader)
    restarted = WireMember(port, "g", "app", instance_id=old_leader.instance_id, join_version=join_version)
    answer = restarted.join()
    assert answer.generation_id == old_leader.generation
    if join_version >= 9:
        # KIP-814: it is the leader again, told to skip the assignment.
        assert (answer.leader, answer.skip_assignment) == (restarted.member_id, True)
    else:
        # Before v9 there is no skip flag: the answer must not make it believe it leads,
        # or it would compute an assignment that the stable group never hands out.
        assert answer.leader != restarted.member_id
        assert list(answer.members) == []
    synced = restarted.sync()
    assert bytes(synced.assignment) == plan[old_leader.member_id]


# ---------------------------------------------------------------------------- restart


def test_a_broker_restart_keeps_every_committed_offset(tmp_path: Any) -> None:
    data_dir = tmp_path / "data"
    expected: dict[str, dict[tuple[str, int], tuple[int, str | None]]] = {}
    with BrokerThread(data_dir, properties={"offsets.topic.num.partitions": "5"}) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        create_topic(broker.bootstrap_servers, "gone", 1)  # offsets of a missing topic are refused
        (member,), _ = stable_group(broker.port, "active", ["m"])
        for round_ in range(3):  # later commits replace earlier ones
            offsets = {(TOPIC, p): (100 * round_ + p, f"round {round_}") for p in range(3)}
            assert set(member.commit(offsets).values()) == {ErrorCode.none}
        expected["active"] = offsets
        with WireClient(broker.port) as client:
            for g in range(12):  # spread over the five offsets partitions
                simple_commit(client, f"batch-{g}", {(TOPIC, p): g * 10 + p for p in range(3)})
                expected[f"batch-{g}"] = {(TOPIC, p): (g * 10 + p, "") for p in range(3)}
            simple_commit(client, "deleted", {(TOPIC, 0): 1})
            assert client.call("delete_groups", 2, {"groups_names": ["deleted"]}).results[0].error_code == ErrorCode.none
            simple_commit(client, "trimmed", {(TOPIC, 0): 1, ("gone", 0): 2})
            client.call("offset_delete", 0, {"group_id": "trimmed", "topics": [{"name": "gone", "partitions": [{"partition_index": 0}]}]})
            expected["trimmed"] = {(TOPIC, 0): (1, "")}
        member.close()

    with BrokerThread(data_dir, properties={"offsets.topic.num.partitions": "5"}) as broker:
        with WireClient(broker.port) as client:
            for group_id, offsets in expected.items():
                assert fetch_offsets(client, group_id, None) == offsets, group_id
            assert fetch_offsets(client, "deleted", None) == {}
            groups = list_groups(client)
        assert set(groups) == set(expected)
        # "active"'s member closed its connection without leaving: loaded with its group, as
        # Kafka does, until its session times out; the other groups have no members.
        assert {g: state for g, (state, _) in groups.items()} == {g: "Empty" for g in expected} | {"active": "Stable"}


def _reconnect(member: WireMember, port: int) -> None:
    """The member's process lives on across the broker's restart: a new connection, same identity."""
    member.client.close()
    member.client = WireClient(port, timeout=TIMEOUT_S, client_id=member.client.client_id)


def test_a_broker_restart_keeps_a_stable_group_its_generation_members_and_assignments(tmp_path: Any) -> None:
    # Kafka's coordinator loads each group's metadata record (generation, protocol, leader,
    # members with their assignments and timeouts) and starts every member's session anew.
    data_dir = tmp_path / "data"
    with BrokerThread(data_dir) as broker:
        port = broker.port
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        members, plan = stable_group(port, "g", ["a", "b"], instance_ids=[None, "host-b"])
        generation = members[0].generation
    with BrokerThread(data_dir, port=port) as broker:
        assert (group_state(broker, "g"), group_generation(broker, "g"), group_members(broker, "g")) \
            == ("Stable", generation, 2)
        for m in members:
            _reconnect(m, port)
            assert m.heartbeat() == ErrorCode.none, m.client.client_id
            synced = m.sync()  # a member that missed the SyncGroup answer asks again: same assignment
            assert (synced.error_code, bytes(synced.assignment)) == (ErrorCode.none, plan[m.member_id])
        assert members[0].commit({(TOPIC, 0): (5, None)}) == {(TOPIC, 0): ErrorCode.none}
        with WireClient(port) as client:
            group = describe(client, "g")
        assert (group.group_state, group.protocol_data) == ("Stable", "range")
        assert {(m.member_id, m.group_instance_id, bytes(m.member_assignment)) for m in group.members} \
            == {(m.member_id, m.instance_id, plan[m.member_id]) for m in members}
        assert group_generation(broker, "g") == generation
        for m in members:
            m.close()


def test_a_member_that_does_not_come_back_after_a_broker_restart_is_expired_and_the_group_rebalances(
        tmp_path: Any) -> None:
    data_dir = tmp_path / "data"
    with BrokerThread(data_dir) as broker:
        port = broker.port
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        (stays, gone), _ = stable_group(port, "g", ["stays", "gone"])
        generation = stays.generation
    gone.close()
    with BrokerThread(data_dir, port=port) as broker:
        _reconnect(stays, port)
        assert stays.heartbeat() == ErrorCode.none
        # "gone" never heartbeats again: its session (restarted at load) ends, the group rebalances
        wait_for_rebalance(stays)
        assert group_members(broker, "g") == 1
        answer = stays.join()
        assert (answer.generation_id, answer.leader, [m.member_id for m in answer.members]) \
            == (generation + 1, stays.member_id, [stays.member_id])
        stays.close()


def test_a_static_member_restarting_after_a_broker_restart_is_not_fenced(tmp_path: Any) -> None:
    # The instance's new member id is in the group's metadata record (Kafka writes it when a
    # static member takes its place in a Stable group), so a restart does not bring back the
    # old id and fence the running instance.
    data_dir = tmp_path / "data"
    with BrokerThread(data_dir) as broker:
        port = broker.port
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        (first, static), plan = stable_group(port, "g", ["first", "static"], instance_ids=[None, "host-2"])
        static.close()
        restarted = WireMember(port, "g", "static", instance_id="host-2")
        assert restarted.join().generation_id == static.generation
    with BrokerThread(data_dir, port=port) as broker:
        for m in (first, restarted):
            _reconnect(m, port)
            assert m.heartbeat() == ErrorCode.none, m.client.client_id
        synced = restarted.sync()
        assert (synced.error_code, bytes(synced.assignment)) == (ErrorCode.none, plan[static.member_id])
        for m in (first, restarted):
            m.close()


def test_an_empty_group_without_offsets_is_removed_by_the_offsets_cleanup_and_stays_gone(tmp_path: Any) -> None:
    # Kafka's cleanupGroupMetadata: an Empty group with no committed offsets becomes Dead and
    # its metadata is tombstoned; groups that still hold offsets stay.
    data_dir = tmp_path / "data"
    properties = {"offsets.retention.check.interval.ms": "100"}
    with BrokerThread(data_dir, properties=properties) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 3)
        (member,), _ = stable_group(broker.port, "passing-through", ["p"])
        with WireClient(broker.port) as client:
            simple_commit(client, "keeps-offsets", {(TOPIC, 0): 5})
            left = client.call("leave_group", 3, {"group_id": "passing-through",
                                                  "members": [{"member_id": member.member_id, "group_instance_id": None}]})
            assert left.error_code == ErrorCode.none and left.members[0].error_code == ErrorCode.none
            block_until(lambda: group_state(broker, "passing-through") in (None, "Dead"),
                        "the offsets cleanup removed the empty group")
            assert list_groups(client) == {"keeps-offsets": ("Empty", "")}
        member.close()
    with BrokerThread(data_dir, properties={"offsets.retention.check.interval.ms": "600000"}) as broker:
        with WireClient(broker.port) as client:
            assert list_groups(client) == {"keeps-offsets": ("Empty", "")}
            assert fetch_offsets(client, "keeps-offsets", None) == {(TOPIC, 0): (5, "")}
