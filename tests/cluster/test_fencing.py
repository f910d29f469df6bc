"""A deposed controller's writes are fenced: every state write checks /controller_epoch's
version in the same ZooKeeper transaction (the controller's ZooKeeper side, on a real ZooKeeper)."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

from waits import block_until

from pulllog.cluster.active_controller import ActiveController
from pulllog.cluster.znodes import TopicAssignment

_chroots = itertools.count(1)


def _cluster_with_a_new_topic(zk_client: Any) -> str:
    """A chroot with brokers 1 and 2 live, a controller epoch written twice (version 1), and a
    topic whose partition has no state yet: the controller's next pass must write it."""
    chroot = f"/fencing-{next(_chroots)}"
    for broker_id in (1, 2):
        zk_client.create(f"{chroot}/brokers/ids/{broker_id}", b"{}", ephemeral=True, makepath=True)
    zk_client.create(f"{chroot}/controller_epoch", b"1", makepath=True)
    zk_client.set(f"{chroot}/controller_epoch", b"2")  # a newer controller's election: version 1
    zk_client.create(f"{chroot}/brokers/topics/t", TopicAssignment("t", uuid.uuid4(), {0: (2, 1)}).encode(),
                     makepath=True)
    zk_client.ensure_path(f"{chroot}/admin/delete_topics")
    return chroot


def test_a_controller_whose_epoch_version_is_stale_writes_nothing_and_stops(zk_client: Any) -> None:
    chroot = _cluster_with_a_new_topic(zk_client)
    stale = ActiveController(zk_client, chroot, 1, epoch=1, epoch_zk_version=0)
    stale.start()
    block_until(lambda: not stale.active, "the stale controller stops")
    assert zk_client.exists(f"{chroot}/brokers/topics/t/partitions/0/state") is None


def test_the_current_controller_writes_the_new_partitions_state(zk_client: Any) -> None:
    chroot = _cluster_with_a_new_topic(zk_client)
    current = ActiveController(zk_client, chroot, 2, epoch=2, epoch_zk_version=1)
    current.start()
    try:
        path = f"{chroot}/brokers/topics/t/partitions/0/state"
        block_until(lambda: zk_client.exists(path), "the state is written")
        assert json.loads(zk_client.get(path)[0]) == {"controller_epoch": 2, "leader": 2, "version": 1,
                                                      "leader_epoch": 0, "isr": [2, 1]}
        assert current.active
    finally:
        current.stop()
