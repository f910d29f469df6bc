"""Reading a Kafka cluster's state from its Metadata, for tests that wait on it: who leads a
partition, its in-sync replicas, which broker coordinates a group or a transactional id.

Each probe opens its own short-lived client (pulllog's ``Cluster`` / ``Admin``) and answers
None / False while the cluster cannot say (a broker dead, an election under way), so
``waits.wait_until`` can poll it.
"""

from __future__ import annotations

from typing import Any

from pulllog.client.admin import Admin
from pulllog.client.cluster import Cluster, PartitionInfo
from pulllog.client.errors import KafkaError

_PROBE_ERRORS = (KafkaError, ConnectionError, OSError, TimeoutError)


async def partitions(bootstrap: str, topic: str | None = None) -> dict[tuple[str, int], PartitionInfo] | None:
    """Every partition of ``topic`` (None: of every topic) as Metadata lists it, and None
    while no broker answers."""
    metadata = Cluster(bootstrap, request_timeout_ms=5000, connect_timeout_ms=2000)
    try:
        await metadata.refresh(None if topic is None else [topic])
        return {(t, p): info for t, topic_info in metadata.topics.items() for p, info in topic_info.partitions.items()}
    except _PROBE_ERRORS:
        return None
    finally:
        await metadata.close()


async def brokers(bootstrap: str) -> set[int]:
    metadata = Cluster(bootstrap, request_timeout_ms=5000, connect_timeout_ms=2000)
    try:
        await metadata.refresh(())
        return set(metadata.brokers)
    except _PROBE_ERRORS:
        return set()
    finally:
        await metadata.close()


async def cluster_settled(cluster: Any) -> bool:
    """Every node of ``cluster`` (a scripts/kafka_cluster.KafkaCluster) listed as a live
    broker, and every partition led, with all its replicas in sync."""
    if await brokers(cluster.bootstrap_servers) != set(cluster.nodes):
        return False
    found = await partitions(cluster.bootstrap_servers)
    return found is not None and all(p.leader >= 0 and set(p.isr) == set(p.replicas) for p in found.values())


async def leader(bootstrap: str, topic: str, partition: int = 0) -> int | None:
    """The partition's leader, or None while it has none (or no broker answers)."""
    found = await partitions(bootstrap, topic)
    info = None if found is None else found.get((topic, partition))
    return info.leader if info is not None and info.leader >= 0 else None


async def in_sync(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, ...] | None:
    found = await partitions(bootstrap, topic)
    info = None if found is None else found.get((topic, partition))
    return info.isr if info is not None else None


async def coordinator(bootstrap: str, key: str, *, transactional: bool = False) -> int | None:
    try:
        async with Admin(bootstrap, request_timeout_ms=5000, connect_timeout_ms=2000) as admin:
            return await admin.find_coordinator(key, transactional=transactional)
    except _PROBE_ERRORS:
        return None
