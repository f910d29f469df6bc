"""Consumer groups of confluent-kafka (librdkafka 2.16) members against a real pulllog broker.

Members run in threads of this process (or, to be killed with SIGKILL, in child processes:
crash_member.py). Their rebalance callbacks feed an :class:`Ownership` log keyed by the
generation librdkafka is in, so each test can check the group's promise: in every generation
each partition has exactly one owner, and every partition is owned.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from group_helpers import (
    CONFLUENT_GROUP_TIMINGS,
    TIMEOUT_S,
    Consumed,
    MemberProcess,
    Ownership,
    create_topic,
    librdkafka_generation,
    numbered_topic,
    produce_numbered,
)
from waits import block_until, expired_group_timers, group_generation, group_members, group_state

from pulllog.testing import BrokerThread

PARTITIONS = 12


class ConfluentMember:
    """A librdkafka consumer polling in its own thread, reporting its rebalances to an
    :class:`Ownership` and what it consumed to a :class:`Consumed`."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, name: str, ownership: Ownership,
                 consumed: Consumed | None = None, *, strategy: str = "range", config: dict[str, Any] | None = None,
                 delay_s: float = 0.0) -> None:
        self.name, self.ownership, self.consumed, self.delay_s = name, ownership, consumed, delay_s
        self.cooperative = strategy == "cooperative-sticky"
        self.config = {"bootstrap.servers": bootstrap, "group.id": group_id, "client.id": name,
                       "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                       "auto.commit.interval.ms": 500, **CONFLUENT_GROUP_TIMINGS, **(config or {})}
        self.topic = topic
        self.generations: list[int] = []
        self.outside_assignment: list[tuple[int, int]] = []
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = Consumer(self.config)

        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            generation = librdkafka_generation(c)
            self.generations.append(generation)
            self.ownership.assigned(self.name, generation, [p.partition for p in parts], incremental=self.cooperative)

        def on_revoke(_c: Consumer, parts: list[TopicPartition]) -> None:
            self.ownership.revoked(self.name, [p.partition for p in parts])

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(msg.error())
                    continue
                if msg.partition() not in self.ownership.holdings().get(self.name, ()):
                    self.outside_assignment.append((msg.partition(), msg.offset()))
                if self.consumed is not None:
                    self.consumed.add(self.name, msg.partition(), msg.offset())
                if self.delay_s:
                    time.sleep(self.delay_s)  # a slow application's processing: the behaviour under test, not a wait
        finally:
            consumer.close()  # commits (auto-commit), revokes, sends LeaveGroup (unless static)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not close"


def admin(broker: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def describe_group(client: AdminClient, group_id: str) -> Any:
    return client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)


def committed_offsets(bootstrap: str, group_id: str, topic: str, partitions: int) -> dict[int, tuple[int, str | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
        return {tp.partition: (tp.offset, tp.metadata) for tp in found}
    finally:
        consumer.close()


def closing(*members: ConfluentMember) -> None:
    for m in members:
        m.close()


# ---------------------------------------------------------------------------- admin views


def test_list_consumer_groups_shows_a_group_that_just_joined_and_an_empty_one(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 2)
    retired = Consumer({"bootstrap.servers": bootstrap, "group.id": "retired"})
    retired.commit(offsets=[TopicPartition("events", 0, 1)], asynchronous=False)
    retired.close()
    ownership = Ownership()
    member = ConfluentMember(bootstrap, "live", "events", "live-1", ownership)
    try:
        block_until(lambda: ownership.stable_with(["live-1"], 2), "live-1 joined")
        client = admin(pulllog_broker)
        listed = client.list_consumer_groups().result(TIMEOUT_S)
        assert not listed.errors
        states = {g.group_id: g.state for g in listed.valid}
        assert states == {"live": ConsumerGroupState.STABLE, "retired": ConsumerGroupState.EMPTY}
        assert {g.group_id for g in listed.valid if g.is_simple_consumer_group} == {"retired"}
    finally:
        member.close()


def test_describe_consumer_groups_shows_members_with_client_ids_hosts_and_assignments(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 4)
    ownership = Ownership()
    members = [ConfluentMember(bootstrap, "g", "events", name, ownership) for name in ("billing-a", "billing-b")]
    try:
        block_until(lambda: ownership.stable_with(["billing-a", "billing-b"], 4), "both members own partitions")
        description = describe_group(admin(pulllog_broker), "g")
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert not description.is_simple_consumer_group
        described = {m.client_id: (m.host, sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions))
                     for m in description.members}
        held = ownership.holdings()
        assert described == {name: ("/127.0.0.1", sorted(("events", p) for p in held[name]))
                             for name in ("billing-a", "billing-b")}
        assert len({m.member_id for m in description.members}) == 2
    finally:
        closing(*members)


def test_committed_offset_metadata_strings_round_trip(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
    stored = [TopicPartition("events", 0, 5, metadata="checkpoint=alpha"),
              TopicPartition("events", 1, 6, metadata="{\"batch\": 17, \"host\": \"ünïcødé\"}"),
              TopicPartition("events", 2, 7)]
    consumer.commit(offsets=stored, asynchronous=False)
    consumer.close()
    assert committed_offsets(bootstrap, "g", "events", 3) == {
        0: (5, "checkpoint=alpha"), 1: (6, "{\"batch\": 17, \"host\": \"ünïcødé\"}"), 2: (7, None)}
    client = admin(pulllog_broker)  # alive while its future is pending
    listed = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")])["g"].result(TIMEOUT_S)
    assert {tp.partition: (tp.offset, tp.metadata) for tp in listed.topic_partitions} == {
        0: (5, "checkpoint=alpha"), 1: (6, "{\"batch\": 17, \"host\": \"ünïcødé\"}"), 2: (7, None)}


def test_delete_consumer_groups_answers_non_empty_group_and_group_id_not_found(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 2)
    idle = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle"})
    idle.commit(offsets=[TopicPartition("events", 0, 3)], asynchronous=False)
    idle.close()
    ownership = Ownership()
    busy = ConfluentMember(bootstrap, "busy", "events", "busy-1", ownership)
    try:
        block_until(lambda: ownership.stable_with(["busy-1"], 2), "busy-1 joined")
        client = admin(pulllog_broker)
        futures = client.delete_consumer_groups(["busy", "unknown", "idle"], request_timeout=TIMEOUT_S)
        errors = {}
        for group_id, future in futures.items():
            try:
                future.result(TIMEOUT_S)
                errors[group_id] = KafkaError.NO_ERROR
            except KafkaException as exc:
                errors[group_id] = exc.args[0].code()
        assert errors == {"busy": KafkaError.NON_EMPTY_GROUP, "unknown": KafkaError.GROUP_ID_NOT_FOUND,
                          "idle": KafkaError.NO_ERROR}
        assert {g.group_id for g in client.list_consumer_groups().result(TIMEOUT_S).valid} == {"busy"}
        assert committed_offsets(bootstrap, "idle", "events", 1) == {0: (-1001, None)}
    finally:
        busy.close()


# ---------------------------------------------------------------------------- static membership


def test_a_static_member_restarting_within_its_session_timeout_keeps_its_assignment_and_generation(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", 6)
    ownership = Ownership()
    steady = ConfluentMember(bootstrap, "g", "events", "steady", ownership, config={"group.instance.id": "host-1"})
    block_until(lambda: ownership.stable_with(["steady"], 6), "steady joined")
    restarting = ConfluentMember(bootstrap, "g", "events", "restarting", ownership, config={"group.instance.id": "host-2"})
    try:
        generation = block_until(lambda: ownership.stable_with(["steady", "restarting"], 6), "both members own partitions")
        before = ownership.generation(generation)["restarting"]
        steady_callbacks = len(steady.generations)
        restarting.close()  # a static member does not leave: its place waits for session.timeout.ms
        again = ConfluentMember(bootstrap, "g", "events", "restarting-again", ownership,
                                config={"group.instance.id": "host-2"})
        try:
            block_until(lambda: again.generations, "the restarted member got its assignment")
            assert again.generations == [generation]
            assert ownership.holdings()["restarting-again"] == before
            # No rebalance: the coordinator never left Stable (a rebalance, even a finished
            # one, would have bumped the generation), so the other member has nothing to notice.
            assert (group_state(pulllog_broker, "g"), group_generation(pulllog_broker, "g")) == ("Stable", generation)
            assert len(steady.generations) == steady_callbacks, "the other member went through a rebalance"
        finally:
            again.close()
    finally:
        steady.close()


# ---------------------------------------------------------------------------- restart


def test_a_broker_restart_keeps_every_committed_offset(tmp_path: Any) -> None:
    data_dir = tmp_path / "data"
    options = {"properties": {"offsets.topic.num.partitions": "5"}}
    with BrokerThread(data_dir, **options) as broker:
        everything = numbered_topic(broker.bootstrap_servers, "events", 4, 20)
        ownership, consumed = Ownership(), Consumed()
        member = ConfluentMember(broker.bootstrap_servers, "readers", "events", "reader", ownership, consumed)
        block_until(lambda: consumed.union() == everything, "the reader consumed everything")
        member.close()  # commits its position
        for n in range(10):
            c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"other-{n}"})
            c.commit(offsets=[TopicPartition("events", p, n + p, metadata=f"n={n}") for p in range(4)], asynchronous=False)
            c.close()
        expected = {g: committed_offsets(broker.bootstrap_servers, g, "events", 4)
                    for g in ["readers", *(f"other-{n}" for n in range(10))]}
        assert expected["readers"] == {p: (20, None) for p in range(4)}

    with BrokerThread(data_dir, **options) as broker:
        for group_id, offsets in expected.items():
            assert committed_offsets(broker.bootstrap_servers, group_id, "events", 4) == offsets, group_id
        # and a member of the group resumes where the group was, not from the beginning
        produce_numbered(broker.bootstrap_servers, "events", 4, 5)
        ownership, consumed = Ownership(), Consumed()
        member = ConfluentMember(broker.bootstrap_servers, "readers", "events", "reader", ownership, consumed)
        try:
            block_until(lambda: consumed.count() >= 20, "the reader consumed the new records")
            # A reader that started over would have read offsets below 20 first, in partition order.
            assert sorted(consumed.union()) == sorted((p, o) for p in range(4) for o in range(20, 25))
        finally:
            member.close()


# ---------------------------------------------------------------------------- membership changes


def test_members_joining_and_leaving_keep_one_owner_per_partition_in_every_generation(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", PARTITIONS)
    ownership = Ownership()
    members: dict[str, ConfluentMember] = {}

    def settle(names: list[str]) -> int:
        return block_until(lambda: ownership.stable_with(names, PARTITIONS), f"{names} own every partition")

    try:
        for name in ("a", "b", "c"):
            members[name] = ConfluentMember(bootstrap, "g", "events", name, ownership)
            settle(list(members))
        for name in ("b", "a"):
            members.pop(name).close()
            settle(list(members))
        members["d"] = ConfluentMember(bootstrap, "g", "events", "d", ownership)
        last = settle(["c", "d"])
    finally:
        closing(*members.values())
    ownership.assert_one_owner_per_partition(PARTITIONS)
    assert len(ownership.by_generation) >= 6
    assert {len(p) for p in ownership.generation(last).values()} == {6}


def test_a_killed_member_loses_its_partitions_to_the_survivors_after_its_session_timeout(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "events", PARTITIONS)
    ownership = Ownership()
    victim = MemberProcess("victim", {"bootstrap.servers": bootstrap, "group.id": "g", "client.id": "victim",
                                      **CONFLUENT_GROUP_TIMINGS}, "events", ownership=ownership)
    survivors: list[ConfluentMember] = []
    try:
        block_until(lambda: ownership.stable_with(["victim"], PARTITIONS), "the victim joined")
        for name in ("a", "b"):
            survivors.append(ConfluentMember(bootstrap, "g", "events", name, ownership))
            block_until(lambda: ownership.stable_with(["victim", *(s.name for s in survivors)], PARTITIONS),
                       f"{name} joined")
        before = ownership.latest_generation()
        victims_partitions = ownership.generation(before)["victim"]
        assert victims_partitions
        expired_before = expired_group_timers(pulllog_broker)
        victim.kill()
        after = block_until(lambda: ownership.stable_with(["a", "b"], PARTITIONS), "the survivors own every partition")
        # The victim left by its session timer running out (a SIGKILLed process sends no LeaveGroup).
        assert expired_group_timers(pulllog_broker) > expired_before
        assert group_members(pulllog_broker, "g") == 2
    finally:
        victim.stop()
        closing(*survivors)
    assert after > before
    survivors_now = ownership.generation(after)
    assert victims_partitions <= survivors_now["a"] | survivors_now["b"]
    ownership.assert_one_owner_per_partition(PARTITIONS)


# ---------------------------------------------------------------------------- interop: consuming a topic


def consume_with_growing_group(broker: Any, strategy: str, group_id: str) -> tuple[Ownership, Consumed, set[tuple[int, int]], dict[str, ConfluentMember]]:
    """Three members join one after another while the group consumes a 12-partition topic of
    pre-produced records, then one leaves; returns once every record has been consumed."""
    bootstrap = broker.bootstrap_servers
    everything = numbered_topic(bootstrap, "events", PARTITIONS, 60)
    ownership, consumed = Ownership(), Consumed()
    members: dict[str, ConfluentMember] = {}

    def add(name: str) -> None:
        members[name] = ConfluentMember(bootstrap, group_id, "events", name, ownership, consumed,
                                        strategy=strategy, delay_s=0.004)

    add("a")
    block_until(lambda: consumed.count() >= 100, "a consumed a little")
    add("b")
    block_until(lambda: ownership.stable_with(["a", "b"], PARTITIONS) and consumed.count() >= 250, "b took a share")
    add("c")
    block_until(lambda: ownership.stable_with(["a", "b", "c"], PARTITIONS) and consumed.count() >= 400, "c took a share")
    members.pop("a").close()
    block_until(lambda: ownership.stable_with(["b", "c"], PARTITIONS), "b and c took over a's partitions")
    block_until(lambda: consumed.union() == everything, "every record was consumed")
    return ownership, consumed, everything, members


def assert_group_consumed_everything(broker: Any, group_id: str, ownership: Ownership, consumed: Consumed,
                                     everything: set[tuple[int, int]], members: dict[str, ConfluentMember],
                                     *, cooperative: bool) -> None:
    outside = {m.name: m.outside_assignment for m in members.values() if m.outside_assignment}
    assert not outside, f"records consumed from partitions the member did not own: {outside}"
    closing(*members.values())
    assert consumed.union() == everything
    ownership.assert_one_owner_per_partition(
        PARTITIONS, complete=(lambda g: g == ownership.latest_generation()) if cooperative else None)
    # at-least-once, and here (no crash) each hand-over started at the committed offset
    assert committed_offsets(broker.bootstrap_servers, group_id, "events", PARTITIONS) == {
        p: (60, None) for p in range(PARTITIONS)}
    duplicates = {po: n for po, n in Counter(po for pos in consumed.by_member.values() for po in pos).items() if n > 1}
    assert not duplicates, f"records consumed twice without a crash: {sorted(duplicates)[:20]}"


def test_a_range_group_consumes_a_12_partition_topic_without_gap_or_double_ownership(pulllog_broker: Any) -> None:
    ownership, consumed, everything, members = consume_with_growing_group(pulllog_broker, "range", "range-group")
    assert_group_consumed_everything(pulllog_broker, "range-group", ownership, consumed, everything, members,
                                     cooperative=False)


def test_a_cooperative_sticky_group_consumes_a_12_partition_topic_without_gap_or_double_ownership(pulllog_broker: Any) -> None:
    ownership, consumed, everything, members = consume_with_growing_group(pulllog_broker, "cooperative-sticky", "sticky-group")
    assert_group_consumed_everything(pulllog_broker, "sticky-group", ownership, consumed, everything, members,
                                     cooperative=True)
    # incremental: when b and c joined, a kept what it did not have to give away
    a_generations = sorted((g, parts["a"]) for g, parts in ownership.by_generation.items() if "a" in parts)
    assert all(later <= earlier or earlier <= later for (_, earlier), (_, later) in itertools.pairwise(a_generations))


# ---------------------------------------------------------------------------- at-least-once under a crash


def test_a_consumer_killed_mid_batch_is_replaced_from_its_last_commit_without_a_gap(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    everything = numbered_topic(bootstrap, "payments", 4, 100)
    config = {"bootstrap.servers": bootstrap, "group.id": "payments", "client.id": "a",
              "auto.offset.reset": "earliest", **CONFLUENT_GROUP_TIMINGS}
    a = MemberProcess("a", config, "payments", commit_every=25, process_delay_s=0.002)
    try:
        # kill it between two commits: some records processed, not yet committed
        block_until(lambda: len(a.of_kind("committed")) >= 4 and 5 <= len(a.of_kind("processed")) % 25 <= 20,
                   "a processed part of a batch", interval_s=0.001)
        a.kill()
    finally:
        a.stop()
    processed_by_a = [(e["partition"], e["offset"]) for e in a.of_kind("processed")]
    last_commit: dict[int, int] = {}
    for e in a.of_kind("committed"):
        last_commit.update({int(p): o for p, o in e["offsets"].items() if o >= 0})  # -1001: nothing stored
    assert len(processed_by_a) < len(everything), "a finished before it was killed"

    ownership, consumed = Ownership(), Consumed()
    b = ConfluentMember(bootstrap, "payments", "payments", "b", ownership, consumed,
                        config={"enable.auto.commit": False})
    try:
        block_until(lambda: consumed.union() | set(processed_by_a) == everything, "a and b together processed everything")
    finally:
        b.close()
    by_b = consumed.by_member["b"]
    # b took over each partition exactly where a's last commit left it
    firsts = {}
    for p, o in by_b:
        firsts.setdefault(p, o)
    assert firsts == {p: last_commit.get(p, 0) for p in firsts}
    assert set(processed_by_a) | set(by_b) == everything  # no gap
    redone = set(processed_by_a) & set(by_b)
    assert redone, "a was killed mid-batch, so b processed some of a's records again (at-least-once)"
