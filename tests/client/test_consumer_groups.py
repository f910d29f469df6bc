"""pulllog's Consumer as a consumer group member, against a real broker.

Every record is numbered by (partition, offset), so "no gap" is a set comparison: what the
members consumed (or processed) together must be every (partition, offset) of the topic.
Ownership comes from the members' rebalance callbacks, by generation: in a generation each
partition has at most one owner, and once the group is stable every partition has one.

Timings: the broker's minimum session timeout (6 s) and a 500 ms heartbeat, so a killed
member is noticed within seconds; every wait is bounded generously (TIMEOUT_S).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka.admin import AdminClient

from pulllog.client.consumer import CommitFailedError, Consumer
from pulllog.client.types import TopicPartition
from pulllog.testing import BrokerThread

from group_helpers import Consumed, Ownership, create_topic, numbered_topic, produce_numbered
from waits import (
    expired_group_timers,
    group_generation,
    group_members,
    group_state,
    wait_until,
)

TIMEOUT_S = 60.0
SESSION_TIMEOUT_MS = 6000  # the broker's minimum
HEARTBEAT_INTERVAL_MS = 500
GROUP_OPTIONS: dict[str, Any] = {
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
    "rebalance_timeout_ms": 30_000,
    "auto_offset_reset": "earliest",
    "auto_commit_interval_ms": 500,
}
MEMBER_SCRIPT = Path(__file__).with_name("pulllog_member.py")


# ---------------------------------------------------------------------------- waiting


# ---------------------------------------------------------------------------- members


class Member:
    """A pulllog consumer in this event loop that subscribes, consumes in a task it owns, and
    reports its rebalance callbacks to an Ownership."""

    def __init__(self, name: str, broker: Any, group_id: str, topics: Any, ownership: Ownership,
                 consumed: Consumed | None = None, *, cooperative: bool = False, **options: Any) -> None:
        self.name = name
        self.ownership = ownership
        self.consumed = consumed
        self.cooperative = cooperative
        self.topics = topics
        self.assigned_calls: list[tuple[int, frozenset[TopicPartition]]] = []
        self.revoked_calls: list[frozenset[TopicPartition]] = []
        self.lost_calls: list[frozenset[TopicPartition]] = []
        config = {**GROUP_OPTIONS, **options}
        if cooperative:
            config.setdefault("partition_assignment_strategy", ("cooperative-sticky",))
        self.consumer = Consumer(broker.bootstrap_servers, group_id=group_id, client_id=name,
                                 on_partitions_assigned=self._assigned, on_partitions_revoked=self._revoked,
                                 on_partitions_lost=self._lost, **config)
        self._task: asyncio.Task[None] | None = None

    def _assigned(self, tps: set[TopicPartition]) -> None:
        self.assigned_calls.append((self.consumer.generation, frozenset(tps)))
        self.ownership.assigned(self.name, self.consumer.generation, (tp.partition for tp in tps),
                                incremental=self.cooperative)

    async def _revoked(self, tps: set[TopicPartition]) -> None:  # async callbacks work too
        self.revoked_calls.append(frozenset(tps))
        self.ownership.revoked(self.name, (tp.partition for tp in tps))

    def _lost(self, tps: set[TopicPartition]) -> None:
        self.lost_calls.append(frozenset(tps))
        self.ownership.revoked(self.name, (tp.partition for tp in tps))

    async def start(self) -> Member:
        await self.consumer.start()
        self.consumer.subscribe(self.topics)
        self._task = asyncio.get_running_loop().create_task(self._consume(), name=f"consume-{self.name}")
        return self

    async def _consume(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100)
            if self.consumed is not None:
                for tp, records in batch.items():
                    for r in records:
                        self.consumed.add(self.name, tp.partition, r.offset)

    async def stop_reading(self) -> None:
        """Stop calling getmany(), leaving the consumer open: an application that stalls."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def resume_reading(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._consume(), name=f"consume-{self.name}")

    async def stop(self) -> None:
        """Stop consuming and close: commit, revoke, LeaveGroup."""
        await self.stop_reading()
        await self.consumer.close()
        self.ownership.gone(self.name)


class ChildMember:
    """A pulllog consumer in a child process (pulllog_member.py), to SIGKILL or SIGSTOP."""

    def __init__(self, name: str, broker: Any, group_id: str, topic: str, ownership: Ownership | None = None,
                 **spec: Any) -> None:
        self.name = name
        self.ownership = ownership
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        spec = {"name": name, "bootstrap": broker.bootstrap_servers, "group_id": group_id, "topic": topic,
                "options": {**GROUP_OPTIONS, **spec.pop("options", {})}, **spec}
        self.proc = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT), json.dumps(spec)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, name=f"reader-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if self.ownership is not None:
                if event["event"] == "assigned":
                    self.ownership.assigned(self.name, event["generation"], event["partitions"])
                elif event["event"] in ("revoked", "lost"):
                    self.ownership.revoked(self.name, event["partitions"])
            with self.lock:
                self.events.append(event)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit, the socket closed by the kernel."""
        self.proc.kill()
        self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        if self.ownership is not None:
            self.ownership.gone(self.name)

    def stop_process(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def continue_process(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> ChildMember:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT_S)


def librdkafka_generation(consumer: RdConsumer) -> int:
    """librdkafka's serialized group metadata is b"CGMDv2:" and the generation (int32, host order)."""
    blob = bytes(consumer.consumer_group_metadata())
    assert blob.startswith(b"CGMDv2:"), blob
    return int(struct.unpack_from("=i", blob, 7)[0])


class RdMember:
    """A librdkafka (confluent-kafka) consumer in a thread of its own, range assignor."""

    def __init__(self, name: str, broker: Any, group_id: str, topic: str, ownership: Ownership,
                 consumed: Consumed) -> None:
        self.name = name
        self.consumer = RdConsumer({
            "bootstrap.servers": broker.bootstrap_servers, "group.id": group_id, "client.id": name,
            "partition.assignment.strategy": "range", "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "max.poll.interval.ms": 30_000, "auto.commit.interval.ms": 500})

        def on_assign(c: RdConsumer, parts: list[Any]) -> None:
            ownership.assigned(name, librdkafka_generation(c), (p.partition for p in parts))

        def on_revoke(c: RdConsumer, parts: list[Any]) -> None:
            ownership.revoked(name, (p.partition for p in parts))

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        self._stop = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                while not self._stop.is_set():
                    msg = self.consumer.poll(0.1)
                    if msg is not None and not msg.error():
                        consumed.add(name, msg.partition(), msg.offset())
                self.consumer.close()  # commits, revokes, leaves
            except BaseException as exc:
                self.error = exc
            ownership.gone(name)

        self._thread = threading.Thread(target=run, name=f"rdkafka-{name}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, TIMEOUT_S)
        assert self.error is None, self.error


async def stop_all(*members: Member | RdMember) -> None:
    for m in members:
        await m.stop()


def tps(topic: str, partitions: Iterable[int]) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in partitions}


# ---------------------------------------------------------------------------- membership


async def test_members_joining_and_leaving_keep_exactly_one_owner_per_partition_in_every_generation(
        pulllog_broker: Any) -> None:
    everything = numbered_topic(pulllog_broker.bootstrap_servers, "joins", 12, 20)
    ownership, consumed = Ownership(), Consumed()

    def member(name: str) -> Member:
        return Member(name, pulllog_broker, "g-joins", ["joins"], ownership, consumed)

    a = await member("a").start()
    b = c = None
    try:
        await wait_until(lambda: ownership.stable_with(["a"], 12), "a owns all 12 partitions")
        b = await member("b").start()
        await wait_until(lambda: ownership.stable_with(["a", "b"], 12), "a and b share the partitions")
        c = await member("c").start()
        await wait_until(lambda: ownership.stable_with(["a", "b", "c"], 12), "a, b and c share the partitions")
        assert sorted(len(p) for p in ownership.latest()[1].values()) == [4, 4, 4]
        await b.stop()
        b = None
        await wait_until(lambda: ownership.stable_with(["a", "c"], 12), "a and c share b's partitions")
        await a.stop()
        a = None
        await wait_until(lambda: ownership.stable_with(["c"], 12), "c owns all 12 partitions")
        await wait_until(lambda: consumed.union() == everything, "every record was consumed")
    finally:
        await stop_all(*(m for m in (a, b, c) if m is not None))

    generations = sorted(ownership.by_generation)
    assert len(generations) >= 5, ownership.timeline
    # An eager protocol: every member of a generation reports its whole assignment in it.
    ownership.assert_one_owner_per_partition(12, complete=lambda g: True)


async def test_a_member_killed_without_leaving_loses_its_partitions_after_the_session_timeout(
        pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "kills", 12, 5)
    ownership = Ownership()
    with ChildMember("doomed", pulllog_broker, "g-kills", "kills", ownership) as doomed:
        await wait_until(lambda: ownership.stable_with(["doomed"], 12), "the child owns all 12 partitions")
        survivor = await Member("survivor", pulllog_broker, "g-kills", ["kills"], ownership).start()
        try:
            await wait_until(lambda: ownership.stable_with(["doomed", "survivor"], 12), "the two share the topic")
            generation = ownership.latest()[0]
            expired_before = expired_group_timers(pulllog_broker)
            doomed.kill()
            await wait_until(lambda: ownership.stable_with(["survivor"], 12), "the survivor owns all 12 partitions")
            # The broker noticed when the child's session timer ran out (a killed process sends
            # no LeaveGroup), and only the survivor is left.
            assert expired_group_timers(pulllog_broker) > expired_before
            assert group_members(pulllog_broker, "g-kills") == 1
        finally:
            await survivor.stop()
    assert ownership.latest()[0] > generation
    ownership.assert_one_owner_per_partition(12, complete=lambda g: True)


# ---------------------------------------------------------------------------- delivery


async def test_a_consumer_killed_mid_batch_is_replaced_from_its_last_commit_and_nothing_is_skipped(
        pulllog_broker: Any) -> None:
    everything = numbered_topic(pulllog_broker.bootstrap_servers, "crash", 4, 300)
    # A commits after each batch of at most 40 records, and stops for good right after its
    # 100th record: at least two commits done, and a batch processed but not committed.
    with ChildMember("a", pulllog_broker, "g-crash", "crash", batch=40, commit=True, hang_after=100) as a:
        await wait_until(lambda: a.of_kind("hanging"), "the child is in the middle of a batch")
        a.kill()
    a_processed = [(e["partition"], e["offset"]) for e in a.of_kind("processed")]
    assert len(a.of_kind("committed")) >= 2
    last_commit = {int(p): o for p, o in a.of_kind("committed")[-1]["offsets"].items()}
    uncommitted = [po for po in a_processed if po[1] >= last_commit[po[0]]]
    assert uncommitted

    b_first: dict[int, int] = {}
    b_processed: list[tuple[int, int]] = []
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-crash", **GROUP_OPTIONS) as b:
        b.subscribe(["crash"])
        while set(a_processed) | set(b_processed) != everything:
            batch = await asyncio.wait_for(b.getmany(timeout_ms=100), TIMEOUT_S)
            for tp, records in batch.items():
                b_first.setdefault(tp.partition, records[0].offset)
                b_processed += [(tp.partition, r.offset) for r in records]

    # B took over exactly at A's last commit: what A processed after it is processed twice
    # (at least once), and nothing is skipped (no gap).
    assert b_first == last_commit
    assert sorted(set(a_processed) & set(b_processed)) == sorted(uncommitted)
    assert set(a_processed) | set(b_processed) == everything


async def test_auto_commit_commits_a_batch_only_once_the_application_asks_for_more(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "processed", 1, 100)
    tp = TopicPartition("processed", 0)
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-processed", **GROUP_OPTIONS) as consumer:
        consumer.subscribe("processed")
        batch = await asyncio.wait_for(consumer.getmany(timeout_ms=TIMEOUT_S * 1000, max_records=30), TIMEOUT_S)
        end = batch[tp][-1].offset + 1
        # The application is still processing the batch: several auto-commit intervals pass,
        # and what is committed is where it started, not the batch's end. The sleep is the
        # behaviour under test (the client's own auto-commit timer firing while the application
        # holds the batch); nothing on the broker shows a commit that was rightly not sent.
        await asyncio.sleep(4 * GROUP_OPTIONS["auto_commit_interval_ms"] / 1000)
        assert await consumer.committed(tp) in (None, 0)
        await consumer.getmany(timeout_ms=0, max_records=10)  # done with the batch: ask for more

        async def batch_committed() -> bool:
            return await consumer.committed(tp) == end
        await wait_until(batch_committed, "the first batch is committed")


async def test_a_member_paused_beyond_its_session_loses_its_partitions_and_its_commit_fails(
        pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "paused", 2, 10)
    ownership = Ownership()
    with ChildMember("sleepy", pulllog_broker, "g-paused", "paused", ownership) as sleepy:
        await wait_until(lambda: ownership.stable_with(["sleepy"], 2), "the child owns both partitions")
        other = await Member("other", pulllog_broker, "g-paused", ["paused"], ownership).start()
        try:
            await wait_until(lambda: ownership.stable_with(["other", "sleepy"], 2), "the two share the topic")
            sleepy.stop_process()  # a pause longer than the session timeout (a GC pause, a stuck host)
            await wait_until(lambda: ownership.stable_with(["other"], 2), "the other member owns both partitions")
            sleepy.send("commit")  # read as soon as it runs again
            sleepy.continue_process()
            failed = await wait_until(lambda: sleepy.of_kind("commit_failed"), "the child's commit failed")
            await wait_until(lambda: sleepy.of_kind("lost"), "the child was told its partitions are lost")
        finally:
            await other.stop()
    assert failed[0]["error"] == CommitFailedError.__name__, failed
    assert "rebalanc" in failed[0]["message"], failed
    ownership.assert_one_owner_per_partition(2, complete=lambda g: False)


async def test_a_member_that_stops_reading_for_rebalance_timeout_ms_leaves_and_rejoins_at_its_next_read(
        pulllog_broker: Any) -> None:
    # Kafka's max.poll.interval.ms: heartbeats alone do not keep partitions with a member whose
    # application has stopped reading; its partitions go to a member that reads.
    numbered_topic(pulllog_broker.bootstrap_servers, "stalling", 2, 10)
    ownership = Ownership()
    stalled = await Member("stalled", pulllog_broker, "g-stalling", ["stalling"], ownership,
                           rebalance_timeout_ms=2000).start()
    reader = await Member("reader", pulllog_broker, "g-stalling", ["stalling"], ownership).start()
    try:
        await wait_until(lambda: ownership.stable_with(["reader", "stalled"], 2), "the two share the topic")
        await stalled.stop_reading()
        await wait_until(lambda: ownership.stable_with(["reader"], 2), "the reader owns both partitions")
        assert stalled.consumer.generation == -1
        stalled.resume_reading()
        await wait_until(lambda: stalled.lost_calls, "the stalled member was told its partitions are lost")
        await wait_until(lambda: ownership.stable_with(["reader", "stalled"], 2), "the two share the topic again")
    finally:
        await stop_all(stalled, reader)
    ownership.assert_one_owner_per_partition(2, complete=lambda g: False)


async def test_a_broker_restart_keeps_the_committed_offsets(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with BrokerThread(data_dir) as broker:
        everything = numbered_topic(broker.bootstrap_servers, "durable", 3, 40)
        async with Consumer(broker.bootstrap_servers, group_id="g-durable", enable_auto_commit=False,
                            **GROUP_OPTIONS) as consumer:
            consumer.subscribe(["durable"])
            first: set[tuple[int, int]] = set()
            while len(first) < 50:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=100, max_records=10), TIMEOUT_S)
                first |= {(tp.partition, r.offset) for tp, rs in batch.items() for r in rs}
            await consumer.commit()
            committed = {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}
        port = broker.port

    with BrokerThread(data_dir, port=port) as broker:
        async with Consumer(broker.bootstrap_servers, group_id="g-durable", **GROUP_OPTIONS) as consumer:
            assert {p: await consumer.committed(TopicPartition("durable", p)) for p in range(3)} == committed
            consumer.subscribe(["durable"])
            rest: set[tuple[int, int]] = set()
            starts: dict[int, int] = {}
            while first | rest != everything:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=100), TIMEOUT_S)
                for tp, rs in batch.items():
                    starts.setdefault(tp.partition, rs[0].offset)
                    rest |= {(tp.partition, r.offset) for r in rs}
    assert starts == {p: o for p, o in committed.items() if o < 40}
    assert not first & rest, "records read before the restart were read again"


# ---------------------------------------------------------------------------- interop and protocols


@pytest.mark.parametrize("leader", ["pulllog", "rdkafka"])
async def test_a_mixed_group_of_pulllog_and_librdkafka_members_consumes_everything_with_one_owner_per_partition(
        pulllog_broker: Any, leader: str) -> None:
    """The first member to join leads the group and runs the range assignor for everyone."""
    everything = numbered_topic(pulllog_broker.bootstrap_servers, "mixed", 12, 30)
    ownership, consumed = Ownership(), Consumed()
    members: list[Member | RdMember] = []
    order = ["pulllog-1", "rdkafka-1", "pulllog-2", "rdkafka-2"]
    if leader == "rdkafka":
        order = ["rdkafka-1", "pulllog-1", "rdkafka-2", "pulllog-2"]
    try:
        for name in order:
            if name.startswith("pulllog"):
                members.append(await Member(name, pulllog_broker, "g-mixed", ["mixed"], ownership, consumed).start())
            else:
                members.append(RdMember(name, pulllog_broker, "g-mixed", "mixed", ownership, consumed))
            # joined in this order, so the first one leads
            await wait_until(lambda: group_members(pulllog_broker, "g-mixed") == len(members),
                             f"{name} is a member of the group")
        final = await wait_until(lambda: ownership.stable_with(order, 12), "all four members share the topic")
        await wait_until(lambda: consumed.union() == everything, "every record was consumed")
        assert sorted(len(p) for p in ownership.latest()[1].values()) == [3, 3, 3, 3]
    finally:
        await stop_all(*members)
    assert consumed.union() == everything
    ownership.assert_one_owner_per_partition(12, complete=lambda g: g == final)


async def test_cooperative_sticky_moves_only_the_partitions_that_must_move(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "sticky", 12, 5)
    ownership = Ownership()

    def member(name: str) -> Member:
        return Member(name, pulllog_broker, "g-sticky", ["sticky"], ownership, cooperative=True)

    a = await member("a").start()
    b = c = None
    try:
        await wait_until(lambda: ownership.stable_with(["a"], 12), "a owns all 12 partitions")
        b = await member("b").start()
        await wait_until(lambda: ownership.stable_with(["a", "b"], 12), "a and b share the partitions")
        before = ownership.holdings()
        assert len(a.revoked_calls) == 1 and len(a.revoked_calls[0]) == 6, a.revoked_calls  # half of 12, no more
        a_revokes, b_revokes = len(a.revoked_calls), len(b.revoked_calls)

        c = await member("c").start()
        await wait_until(lambda: ownership.stable_with(["a", "b", "c"], 12), "a, b and c share the partitions")
        after = ownership.holdings()
        moved_from_a, moved_from_b = a.revoked_calls[a_revokes:], b.revoked_calls[b_revokes:]
    finally:
        await stop_all(*(m for m in (a, b, c) if m is not None))

    # From 6 + 6 to 4 + 4 + 4: a and b each give up 2, and only those 2, in one revoke.
    assert [len(r) for r in moved_from_a] == [2] and [len(r) for r in moved_from_b] == [2]
    assert after["a"] < before["a"] and after["b"] < before["b"]
    assert after["c"] == (before["a"] - after["a"]) | (before["b"] - after["b"])
    assert not a.lost_calls and not b.lost_calls
    # Cooperative: a generation may leave moving partitions unowned, never doubly owned.
    ownership.assert_one_owner_per_partition(12, complete=lambda g: False)


async def test_a_pattern_subscription_picks_up_a_topic_created_later(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "metrics-cpu", 2, 3)
    numbered_topic(pulllog_broker.bootstrap_servers, "logs", 1, 3)
    seen: set[tuple[str, int, int]] = set()
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-pattern", metadata_max_age_ms=500,
                        **GROUP_OPTIONS) as consumer:
        consumer.subscribe(re.compile(r"^metrics-"))

        async def read_until(done: Callable[[], bool]) -> None:
            while not done():
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=100), TIMEOUT_S)
                seen.update((tp.topic, tp.partition, r.offset) for tp, rs in batch.items() for r in rs)

        await read_until(lambda: len(seen) == 6)
        assert consumer.subscription() == {"metrics-cpu"}
        numbered_topic(pulllog_broker.bootstrap_servers, "metrics-disk", 3, 2)
        await read_until(lambda: len(seen) == 12)
        assert consumer.subscription() == {"metrics-cpu", "metrics-disk"}
        assert consumer.assignment() == tps("metrics-cpu", range(2)) | tps("metrics-disk", range(3))
    assert {t for t, _p, _o in seen} == {"metrics-cpu", "metrics-disk"}


async def test_a_static_member_restarting_within_its_session_timeout_gets_its_partitions_back_without_a_rebalance(
        pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "static", 12, 5)
    ownership = Ownership()
    options = {"group_instance_id": "static-1", "session_timeout_ms": 20_000}
    static = await Member("static", pulllog_broker, "g-static", ["static"], ownership, **options).start()
    dynamic = await Member("dynamic", pulllog_broker, "g-static", ["static"], ownership).start()
    try:
        generation = await wait_until(lambda: ownership.stable_with(["static", "dynamic"], 12),
                                      "the two members share the topic")
        held = static.consumer.assignment()
        dynamic_calls = (len(dynamic.assigned_calls), len(dynamic.revoked_calls))
        await static.stop()  # a static member does not leave: its place waits for it
        restarted = await Member("static", pulllog_broker, "g-static", ["static"], ownership, **options).start()
        try:
            await wait_until(lambda: restarted.assigned_calls, "the restarted member has its assignment")
            # No rebalance: the coordinator never left Stable (a rebalance, even a finished one,
            # would have bumped the generation), so the other member has nothing to notice.
            assert (group_state(pulllog_broker, "g-static"), group_generation(pulllog_broker, "g-static")) == (
                "Stable", generation)
            assert restarted.assigned_calls == [(generation, frozenset(held))]
            assert restarted.consumer.generation == dynamic.consumer.generation == generation
            assert (len(dynamic.assigned_calls), len(dynamic.revoked_calls)) == dynamic_calls
        finally:
            await restarted.stop()
    finally:
        await dynamic.stop()


async def test_adding_partitions_to_a_subscribed_topic_rebalances_the_group(pulllog_broker: Any) -> None:
    """The leader watches the partition counts it assigned from and rejoins when they change."""
    from confluent_kafka.admin import NewPartitions

    numbered_topic(pulllog_broker.bootstrap_servers, "growing", 2, 3)
    ownership = Ownership()
    members = [await Member(name, pulllog_broker, "g-growing", ["growing"], ownership, metadata_max_age_ms=500).start()
               for name in ("a", "b")]
    try:
        await wait_until(lambda: ownership.stable_with(["a", "b"], 2), "a and b share 2 partitions")
        admin = AdminClient({"bootstrap.servers": pulllog_broker.bootstrap_servers})
        admin.create_partitions([NewPartitions("growing", 6)])["growing"].result(TIMEOUT_S)
        await wait_until(lambda: ownership.stable_with(["a", "b"], 6), "a and b share 6 partitions")
    finally:
        await stop_all(*members)
    ownership.assert_one_owner_per_partition(6, complete=lambda g: False)


async def test_commit_nowait_commits_in_the_background_and_close_waits_for_it(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "nowait", 1, 10)
    tp = TopicPartition("nowait", 0)
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-nowait", enable_auto_commit=False,
                        **GROUP_OPTIONS) as consumer:
        consumer.subscribe("nowait")
        read = 0
        while read < 10:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=100), TIMEOUT_S)
            read += sum(len(records) for records in batch.values())
        first = consumer.commit_nowait({tp: 4})
        consumer.commit_nowait()  # the position, 10: sent after the first, so it wins
        await first
        assert await consumer.committed(tp) in (4, 10)
        # leaving the block closes the consumer, which waits for the second commit
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-nowait", **GROUP_OPTIONS) as consumer:
        assert await consumer.committed(tp) == 10


def pulllog_tasks() -> set[str]:
    return {name for t in asyncio.all_tasks() if not t.done() and (name := t.get_name()).startswith("pulllog-")}


async def test_close_cancels_and_joins_every_task_the_consumer_started(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "owned", 1, 10)
    before = pulllog_tasks()
    consumer = Consumer(pulllog_broker.bootstrap_servers, group_id="g-owned", enable_auto_commit=True, **GROUP_OPTIONS)
    await consumer.start()
    consumer.subscribe("owned")
    read = 0
    while read < 10:
        batch = await asyncio.wait_for(consumer.getmany(timeout_ms=100), TIMEOUT_S)
        read += sum(len(records) for records in batch.values())
    pending = consumer.commit_nowait()
    running = pulllog_tasks() - before
    # The supervisor and its children: fetcher, group membership with heartbeat and auto-commit
    # (connections read through event-loop protocols: no task of their own).
    assert {"pulllog-consumer", "pulllog-consumer-fetcher", "pulllog-consumer-group",
            "pulllog-heartbeat-g-owned", "pulllog-autocommit-g-owned"} <= running
    await consumer.close()
    await pending
    assert pulllog_tasks() - before == set()


async def test_unsubscribe_leaves_the_group_and_assign_resumes_from_the_committed_offset(pulllog_broker: Any) -> None:
    create_topic(pulllog_broker.bootstrap_servers, "leaving", 4)
    ownership, consumed = Ownership(), Consumed()
    stayer = await Member("stayer", pulllog_broker, "g-leaving", ["leaving"], ownership).start()
    leaver = await Member("leaver", pulllog_broker, "g-leaving", ["leaving"], ownership, consumed).start()
    try:
        await wait_until(lambda: ownership.stable_with(["stayer", "leaver"], 4), "the two share the topic")
        produce_numbered(pulllog_broker.bootstrap_servers, "leaving", 4, 10)
        held = leaver.consumer.assignment()
        mine = {(tp.partition, o) for tp in held for o in range(10)}
        await wait_until(lambda: mine <= consumed.union(), "the leaver read its partitions")
        await leaver.consumer.unsubscribe()
        assert leaver.consumer.assignment() == set() and leaver.consumer.subscription() == set()
        assert leaver.revoked_calls[-1] == frozenset(held)
        await wait_until(lambda: ownership.stable_with(["stayer"], 4), "the stayer owns all 4 partitions")
        some = min(held)
        leaver.consumer.assign([some])
        assert await leaver.consumer.position(some) == 10  # committed on revoke
    finally:
        await stop_all(stayer, leaver)


async def test_a_committed_offset_beyond_the_log_end_resets_per_auto_offset_reset(pulllog_broker: Any) -> None:
    numbered_topic(pulllog_broker.bootstrap_servers, "beyond", 1, 5)
    tp = TopicPartition("beyond", 0)
    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-beyond", **GROUP_OPTIONS) as consumer:
        await consumer.commit({tp: 1000})  # a consumer with no members yet may commit anything
        consumer.subscribe("beyond")
        record = await asyncio.wait_for(consumer.getone(), TIMEOUT_S)
    assert record.offset == 0  # out of range: earliest, not the committed offset again and again


async def test_a_revoke_waits_until_the_application_has_finished_its_batch(pulllog_broker: Any) -> None:
    """Kafka's pattern without auto-commit: commit in on_partitions_revoked. The callback runs
    only once the application asked for more records, so the positions it commits cover only
    processed records."""
    numbered_topic(pulllog_broker.bootstrap_servers, "patient", 1, 100)
    tp = TopicPartition("patient", 0)
    events: list[str] = []
    revoked: list[int] = []

    async def on_revoked(partitions: set[TopicPartition]) -> None:
        if tp in partitions:
            await consumer.commit()
            events.append("revoked")
            revoked.append(await consumer.committed(tp))

    consumer = Consumer(pulllog_broker.bootstrap_servers, group_id="g-patient", enable_auto_commit=False,
                        on_partitions_revoked=on_revoked, **GROUP_OPTIONS)
    other = None
    async with consumer:
        consumer.subscribe("patient")
        batch = await asyncio.wait_for(consumer.getmany(timeout_ms=TIMEOUT_S * 1000, max_records=10), TIMEOUT_S)
        end = batch[tp][-1].offset + 1
        other = await Member("other", pulllog_broker, "g-patient", ["patient"], Ownership()).start()
        try:
            # Still processing the batch while the group rebalances. Left as a sleep: the
            # coordinator's state (it holds the other member's join) raced with the consumer
            # learning of the rebalance; a client-side state to wait on is still to be found.
            await asyncio.sleep(3)
            assert not revoked
            events.append("finished the batch")

            async def revoked_now() -> bool:
                return await consumer.getmany(timeout_ms=100) == {}
            await wait_until(revoked_now, "the partition is revoked")
            await wait_until(lambda: revoked, "the revoke callback ran")
        finally:
            await other.stop()
    assert events == ["finished the batch", "revoked"]
    assert revoked[0] == end  # the processed batch, committed from the callback


async def test_without_a_crash_a_rebalance_hands_no_record_out_twice(pulllog_broker: Any) -> None:
    """Duplicates come only from crashes: a revoke waits for the record in the application's
    hands, hands out no more of the partition, and commits exactly what was processed."""
    # enough records that the slow first member is still reading when the rebalance (a
    # heartbeat interval or two) hands the second member a partition
    everything = numbered_topic(pulllog_broker.bootstrap_servers, "smooth", 2, 400)
    consumed = Consumed()
    ownership = Ownership()

    async def iterate(consumer: Consumer) -> None:
        async for record in consumer:  # one record at a time, slowly
            consumed.add("iterating", record.partition, record.offset)
            await asyncio.sleep(0.005)  # a slow application (the behaviour under test), not a wait

    async with Consumer(pulllog_broker.bootstrap_servers, group_id="g-smooth", **GROUP_OPTIONS) as first:
        first.subscribe("smooth")
        reader = asyncio.get_running_loop().create_task(iterate(first))
        second = None
        try:
            await wait_until(lambda: len(consumed.union()) >= 50, "the first member read 50 records")
            second = await Member("second", pulllog_broker, "g-smooth", ["smooth"], ownership, consumed).start()
            await wait_until(lambda: consumed.union() == everything, "every record was consumed")
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if second is not None:
                await second.stop()
    handed_out = consumed.by_member["iterating"] + consumed.by_member["second"]
    assert len(handed_out) == len(set(handed_out)) == len(everything)
    assert consumed.by_member["second"], "the second member got a partition"


async def test_a_consumer_whose_task_is_cancelled_leaves_its_group_at_once(pulllog_broker: BrokerThread) -> None:
    """Ctrl-C under asyncio.run cancels the task that runs ``async with Consumer``: closing must
    still send LeaveGroup, so the group rebalances now and not a session timeout (45 s) later."""
    from waits import group_members, group_state, wait_until

    bootstrap = pulllog_broker.bootstrap_servers
    create_topic(bootstrap, "cancelled-member", 2)
    joined = asyncio.Event()

    async def member() -> None:
        async with Consumer(bootstrap, group_id="cancelled-g", auto_offset_reset="earliest") as consumer:
            consumer.subscribe(["cancelled-member"])
            joined.set()
            async for _ in consumer:
                pass

    task = asyncio.create_task(member())
    await joined.wait()
    await wait_until(lambda: group_state(pulllog_broker, "cancelled-g") == "Stable", "the member joined")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert group_members(pulllog_broker, "cancelled-g") == 0
    assert group_state(pulllog_broker, "cancelled-g") == "Empty"
