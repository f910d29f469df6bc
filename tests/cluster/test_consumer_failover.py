"""pulllog's assigned consumer keeps reading a partition whose leader is SIGKILLed in
pulllog's cluster: between the broker's death and the controller's election Metadata names
no leader (LEADER_NOT_AVAILABLE's leader -1), and the consumer must ask again rather than
keep that answer (issue 16)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from waits import wait_until
from zk_brokers import Cluster

from pulllog.client.admin import Admin
from pulllog.client.consumer import Consumer
from pulllog.client.producer import Producer
from pulllog.client.types import TopicPartition

TOPIC = "failover"
SHORT_SESSION = ("zookeeper.session.timeout.ms=2000",)  # a SIGKILLed broker is gone in ~2 s


def test_an_assigned_consumer_reads_on_from_the_new_leader(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    bootstrap = ",".join(b.bootstrap_servers for b in own_cluster.brokers.values())
    state_path = own_cluster.path(f"/brokers/topics/{TOPIC}/partitions/0/state")

    def leader() -> int:
        return int(json.loads(zk_client.get(state_path)[0])["leader"])

    async def run() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topic(TOPIC, 1, replication_factor=3, configs={"min.insync.replicas": "2"})
        tp = TopicPartition(TOPIC, 0)
        read: list[int] = []

        async def consume(consumer: Consumer) -> None:
            async for record in consumer:
                read.append(int(record.value))

        async with Producer(bootstrap, acks="all", request_timeout_ms=10_000, retry_backoff_ms=100) as producer, \
                Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200, request_timeout_ms=10_000,
                         retry_backoff_ms=100) as consumer:
            consumer.assign([tp])
            reading = asyncio.ensure_future(consume(consumer))
            try:
                await asyncio.gather(*[await producer.send(TOPIC, b"%d" % n, partition=0) for n in range(20)])
                await wait_until(lambda: len(read) == 20, "the first records are read")
                first = leader()
                own_cluster.broker(first).kill()
                await asyncio.gather(*[await producer.send(TOPIC, b"%d" % n, partition=0) for n in range(20, 40)])
                assert leader() != first
                await wait_until(lambda: len(read) == 40, "the records acknowledged by the new leader are read")
            finally:
                reading.cancel()
        assert read == list(range(40))

    asyncio.run(run())
