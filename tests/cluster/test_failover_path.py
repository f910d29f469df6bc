"""What a failover waits for, on a real ZooKeeper: the controller's pass after a broker's death
(every decision in one transaction, decided from the watches' cache, a stale cache corrected
by fresh reads) and the pipelined watches that carry the new states to every broker."""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from waits import block_until

from pulllog.cluster.active_controller import ActiveController, KnownTopic
from pulllog.cluster.state import LeaderAndIsr
from pulllog.cluster.watches import PipelinedDataWatch
from pulllog.cluster.znodes import TopicAssignment, encode_partition_state

_chroots = itertools.count(1)
PARTITIONS = 8


def _cluster_after_broker_1_died(zk_client: Any) -> tuple[str, TopicAssignment]:
    """Brokers 2 and 3 live (1 is gone), controller epoch 2 at version 1, and a topic whose
    partitions are all led by broker 1 with the ISR [1, 2, 3]: each needs a new leader."""
    chroot = f"/failover-{next(_chroots)}"
    for broker_id in (2, 3):
        zk_client.create(f"{chroot}/brokers/ids/{broker_id}", b"{}", ephemeral=True, makepath=True)
    zk_client.create(f"{chroot}/controller_epoch", b"1", makepath=True)
    zk_client.set(f"{chroot}/controller_epoch", b"2")
    assignment = TopicAssignment("t", uuid.uuid4(), {p: (1, 2, 3) for p in range(PARTITIONS)})
    zk_client.create(f"{chroot}/brokers/topics/t", assignment.encode(), makepath=True)
    for p in range(PARTITIONS):
        zk_client.create(f"{chroot}/brokers/topics/t/partitions/{p}/state",
                         encode_partition_state(LeaderAndIsr(1, 0, (1, 2, 3), 1)), makepath=True)
    zk_client.ensure_path(f"{chroot}/admin/delete_topics")
    return chroot, assignment


def _state(zk_client: Any, chroot: str, partition: int) -> tuple[dict[str, Any], Any]:
    raw, stat = zk_client.get(f"{chroot}/brokers/topics/t/partitions/{partition}/state")
    return json.loads(raw), stat


def _elected(zk_client: Any, chroot: str) -> bool:
    return all(_state(zk_client, chroot, p)[0]["leader"] != 1 for p in range(PARTITIONS))


def test_a_brokers_death_is_written_for_every_partition_in_one_transaction(zk_client: Any) -> None:
    chroot, _assignment = _cluster_after_broker_1_died(zk_client)
    controller = ActiveController(zk_client, chroot, 2, epoch=2, epoch_zk_version=1)
    controller.start()
    try:
        block_until(lambda: _elected(zk_client, chroot), "every partition has a new leader")
        states = [_state(zk_client, chroot, p) for p in range(PARTITIONS)]
        assert [s for s, _stat in states] == [
            {"controller_epoch": 2, "leader": 2, "version": 1, "leader_epoch": 1, "isr": [2, 3]}] * PARTITIONS
        # One ZooKeeper transaction: every znode it changed carries its zxid.
        assert len({stat.mzxid for _s, stat in states}) == 1
    finally:
        controller.stop()


def test_the_controller_decides_from_the_cache_and_reads_again_what_it_had_stale(zk_client: Any) -> None:
    chroot, assignment = _cluster_after_broker_1_died(zk_client)
    # A leader's ISR change the cache has not seen: partition 0 is at version 1 with ISR [1, 3].
    zk_client.set(f"{chroot}/brokers/topics/t/partitions/0/state",
                  encode_partition_state(LeaderAndIsr(1, 0, (1, 3), 1)), version=0)
    stale = LeaderAndIsr(1, 0, (1, 2, 3), 1, zk_version=0)
    # Partition 7's state has not been reported by its watch yet: the controller leaves it.
    cache = {"t": KnownTopic(assignment, {}, {p: stale for p in range(PARTITIONS - 1)})}
    asked: list[Mapping[str, KnownTopic]] = []

    def topics() -> Mapping[str, KnownTopic]:
        asked.append(cache)
        return cache

    controller = ActiveController(zk_client, chroot, 2, epoch=2, epoch_zk_version=1, topics=topics)
    controller.start()
    try:
        block_until(lambda: all(_state(zk_client, chroot, p)[0]["leader"] != 1 for p in range(PARTITIONS - 1)),
                    "the reported partitions have a new leader")
        assert asked
        # Decided again from what ZooKeeper had: 3, the only live replica of its ISR, leads.
        assert _state(zk_client, chroot, 0)[0] == {"controller_epoch": 2, "leader": 3, "version": 1,
                                                   "leader_epoch": 1, "isr": [3]}
        for p in range(1, PARTITIONS - 1):
            assert _state(zk_client, chroot, p)[0]["isr"] == [2, 3]
        assert _state(zk_client, chroot, PARTITIONS - 1)[0]["leader"] == 1  # not reported: untouched
    finally:
        controller.stop()


def test_a_pass_after_its_own_transaction_does_not_decide_again_from_the_states_it_replaced(zk_client: Any) -> None:
    chroot, assignment = _cluster_after_broker_1_died(zk_client)
    # The watches' cache as it was before the controller's transaction, never updated here.
    before = LeaderAndIsr(1, 0, (1, 2, 3), 1, zk_version=0)
    cache = {"t": KnownTopic(assignment, {}, {p: before for p in range(PARTITIONS)})}
    controller = ActiveController(zk_client, chroot, 2, epoch=2, epoch_zk_version=1, topics=lambda: cache)
    controller.start()
    try:
        block_until(lambda: _elected(zk_client, chroot), "every partition has a new leader")
        written = {p: _state(zk_client, chroot, p)[1].mzxid for p in range(PARTITIONS)}
        passes = controller.passes
        controller.trigger()  # as one of its own states arriving at the watches would
        block_until(lambda: controller.passes > passes, "another pass")
        controller.trigger()
        block_until(lambda: controller.passes > passes + 1, "and another")
        assert controller.lost_transactions == 0  # it knew what it wrote
        assert {p: _state(zk_client, chroot, p)[1].mzxid for p in range(PARTITIONS)} == written
    finally:
        controller.stop()


def test_pipelined_watches_follow_creation_changes_and_deletion(zk_client: Any) -> None:
    base = f"/watches-{next(_chroots)}"
    zk_client.ensure_path(base)
    seen: dict[int, list[bytes | None]] = {i: [] for i in range(20)}
    lock = threading.Lock()

    def record(i: int, data: bytes | None) -> bool | None:
        with lock:
            seen[i].append(data)
        return False if data == b"stop" else None

    watches = [PipelinedDataWatch(zk_client, f"{base}/{i}", lambda data, stat, i=i: record(i, data))
               for i in range(20)]
    assert all(values == [None] for values in seen.values())  # the first read is done on return

    txn = zk_client.transaction()
    for i in range(20):
        txn.create(f"{base}/{i}", b"a")
    assert not any(isinstance(r, Exception) for r in txn.commit())
    block_until(lambda: all(values[-1:] == [b"a"] for values in seen.values()), "every creation is seen")

    txn = zk_client.transaction()
    for i in range(20):
        txn.set_data(f"{base}/{i}", b"b")
    txn.commit()
    block_until(lambda: all(values[-1:] == [b"b"] for values in seen.values()), "every change is seen")

    zk_client.delete(f"{base}/0")
    block_until(lambda: seen[0][-1:] == [None], "the deletion is seen")
    zk_client.create(f"{base}/0", b"c")
    block_until(lambda: seen[0][-1:] == [b"c"], "the creation again is seen")

    zk_client.set(f"{base}/1", b"stop")
    block_until(lambda: watches[1].stopped, "a watch whose function returned False ends")
    zk_client.set(f"{base}/1", b"after")
    zk_client.set(f"{base}/2", b"d")  # a later change, seen by another watch: the first has had its chance
    block_until(lambda: seen[2][-1:] == [b"d"], "the other watch goes on")
    assert seen[1][-1] == b"stop"
    assert seen[3] == [None, b"a", b"b"]  # each value once


def test_a_topic_deleted_while_the_cache_still_has_it_does_not_get_its_path_back(zk_client: Any) -> None:
    chroot, assignment = _cluster_after_broker_1_died(zk_client)
    gone = TopicAssignment("gone", uuid.uuid4(), {0: (2, 3)})
    # "gone" was deleted from ZooKeeper; the watches have not said so yet, and its partition
    # had no state: the controller would decide its first leader.
    cache = {"t": KnownTopic(assignment, {}, {p: LeaderAndIsr(1, 0, (1, 2, 3), 1, 0) for p in range(PARTITIONS)}),
             "gone": KnownTopic(gone, {}, {0: None})}
    controller = ActiveController(zk_client, chroot, 2, epoch=2, epoch_zk_version=1, topics=lambda: cache)
    controller.start()
    try:
        block_until(lambda: _elected(zk_client, chroot), "the live topic's partitions have a new leader")
        assert zk_client.exists(f"{chroot}/brokers/topics/gone") is None
    finally:
        controller.stop()
