"""The seam between the cluster layer and the replica manager, on an in-process cluster member:
the partition views ZooKeeper's watches deliver, and a leader's conditional ISR change
(``Broker.alter_isr``) over a real ZooKeeper and two real broker processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from waits import wait_until
from zk_brokers import Cluster

from pulllog.broker import Broker


async def test_views_reach_the_broker_and_the_leaders_isr_change_is_conditional(
        own_cluster: Cluster, zk_client: Any, tmp_path: Path) -> None:
    own_cluster.start(2)  # brokers 1 and 2 (processes); this test's broker is 3, in process
    async with Broker(tmp_path / "broker-3", host="127.0.0.3", port=0, node_id=3,
                      zookeeper_connect=own_cluster.connect) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        futures = admin.create_topics([NewTopic("seam", 1, replica_assignment=[[3, 1, 2]])], operation_timeout=30)
        await asyncio.to_thread(futures["seam"].result)  # answered by the controller once its view has the leader
        view = await wait_until(lambda: (v := broker.partition_views.get(("seam", 0))) is not None and v.state
                                and v, "this broker's view has the partition's leader")
        assert (view.replicas, view.leader, view.leader_epoch) == ((3, 1, 2), 3, 0)
        assert view.state is not None and view.state.isr == (3, 1, 2)

        # The leader (this broker) drops a lagging follower: same leader and epoch, next version.
        shrunk = await broker.alter_isr(view.state.with_isr((3, 1)), "seam", 0)
        assert shrunk is not None and shrunk.zk_version == view.state.zk_version + 1
        data, stat = zk_client.get(own_cluster.path("/brokers/topics/seam/partitions/0/state"))
        assert json.loads(data) == {"controller_epoch": 1, "leader": 3, "version": 1, "leader_epoch": 0, "isr": [3, 1]}
        assert stat.version == shrunk.zk_version
        # (at least: the replica manager may take broker 2 back in right after, by its own write)
        await wait_until(lambda: (s := broker.partition_views[("seam", 0)].state) is not None
                         and s.zk_version >= shrunk.zk_version, "the view follows the write")

        # A change based on the old read loses: None, and nothing is written. (The replica
        # manager may meanwhile have taken broker 2 back in, caught up: its own write, [3, 1, 2].)
        assert await broker.alter_isr(view.state.with_isr((3,)), "seam", 0) is None
        isr = json.loads(zk_client.get(own_cluster.path("/brokers/topics/seam/partitions/0/state"))[0])["isr"]
        assert isr in ([3, 1], [3, 1, 2])

        futures = admin.delete_topics(["seam"], operation_timeout=30)
        await asyncio.to_thread(futures["seam"].result)
        await wait_until(lambda: ("seam", 0) not in broker.partition_views, "the topic leaves this broker's view")
