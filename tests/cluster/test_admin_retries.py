"""pulllog's Admin sends CreateTopics, DeleteTopics, CreatePartitions and ElectLeaders to the
controller; when the controller's broker dies under it (a lost connection, then NOT_CONTROLLER
from a broker that is not the controller yet), it finds the new controller from Metadata and
sends again until the request's timeout, as Kafka's admin client does (issue 16)."""

from __future__ import annotations

import asyncio

from zk_brokers import Cluster

from pulllog.client.admin import Admin, ElectionType
from pulllog.client.errors import KafkaError
from pulllog.client.types import TopicPartition

SHORT_SESSION = ("zookeeper.session.timeout.ms=2000",)  # a SIGKILLed broker is gone in ~2 s


def test_controller_requests_follow_the_controller_when_its_broker_is_killed(own_cluster: Cluster) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    bootstrap = ",".join(b.bootstrap_servers for b in own_cluster.brokers.values())

    async def run() -> None:
        async with Admin(bootstrap) as electing, Admin(bootstrap) as creating:
            controller = (await electing.describe_cluster()).controller_id
            assert controller in own_cluster.brokers
            # Both hold a connection to the controller (their requests went there).
            await creating.create_topic("before", 1, replication_factor=3)
            assert (await electing.elect_leaders(ElectionType.PREFERRED, [TopicPartition("before", 0)])) is not None
            own_cluster.broker(controller).kill()
            # ElectLeaders: the connection is gone, then the survivors answer NOT_CONTROLLER
            # until one of them is elected; the answer is the new controller's.
            outcome = await electing.elect_leaders(ElectionType.PREFERRED, [TopicPartition("before", 0)])
            error = outcome[TopicPartition("before", 0)]
            assert error is None or (isinstance(error, KafkaError) and error.code in (84, 80)), error
            created = await creating.create_topic("after", 2, replication_factor=2)
            assert created.name == "after"
            await creating.create_partitions("after", 3)
            await creating.delete_topic("after")
            new_controller = (await electing.describe_cluster()).controller_id
            assert new_controller in own_cluster.brokers and new_controller != controller

    asyncio.run(run())
