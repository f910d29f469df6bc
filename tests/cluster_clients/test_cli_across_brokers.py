"""The CLI for a cluster, as real ``pulllog`` processes against a real 3-node Apache Kafka
cluster: ``topic create --replication-factor / --replica-assignment``, ``topic describe``
with replicas, ISR and offline replicas, ``cluster describe`` with under-replicated
partitions, and ``leader-election`` (kafka-leader-election.sh's options)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
from typing import Any

import kafka_cluster as kc
import pytest
from cluster_helpers import in_sync, leader, partitions
from waits import wait_until

pytestmark = pytest.mark.timeout(240)

TIMEOUT_S = 90.0
_names = itertools.count(1)


async def pulllog(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pulllog.cli.main", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    return process.returncode or 0, out.decode(), err.decode()


async def ok(*args: str) -> str:
    code, out, err = await pulllog(*args)
    assert code == 0, (args, out, err)
    return out


async def describe(cluster: kc.KafkaCluster, topic: str) -> dict[str, Any]:
    out = await ok("topic", "describe", topic, "--json", "--bootstrap-server", cluster.bootstrap_servers)
    return json.loads(out)


async def test_topic_create_with_a_replication_factor(cluster: kc.KafkaCluster) -> None:
    topic = f"cli-rf-{next(_names)}"
    out = await ok("topic", "create", topic, "--partitions", "3", "--replication-factor", "3",
                   "--bootstrap-server", cluster.bootstrap_servers)
    assert out.strip() == f"created topic {topic!r} with 3 partitions, replication factor 3"
    await wait_until(lambda: in_sync(cluster.bootstrap_servers, topic, 2), "the last partition has an ISR")
    described = await describe(cluster, topic)
    assert [sorted(p["replicas"]) for p in described["partitions"]] == [[1, 2, 3]] * 3
    # Kafka spreads the preferred leaders: each broker first in one partition's replicas
    assert sorted(p["replicas"][0] for p in described["partitions"]) == [1, 2, 3]
    code, out, err = await pulllog("topic", "create", f"{topic}-too-many", "--replication-factor", "4",
                                   "--bootstrap-server", cluster.bootstrap_servers)
    assert code == 1 and out == "", (out, err)
    assert err.count("\n") == 1 and err.startswith(f"error: cannot create topic {topic + '-too-many'!r}: "), err
    # Kafka's words (KRaft: "...replication factor of 4 cannot be reached because only 3 broker(s)
    # are registered"; ZooKeeper mode: "Replication factor: 4 larger than available brokers: 3.")
    assert "eplication factor" in err and re.search(r"\b4\b", err) and re.search(r"\b3\b", err), err


async def test_describe_a_dead_broker_and_elect_the_preferred_leader_when_it_returns(cluster: kc.KafkaCluster) -> None:
    topic = f"cli-election-{next(_names)}"
    bootstrap = cluster.bootstrap_servers
    out = await ok("topic", "create", topic, "--replica-assignment", "1:2:3,2:3:1", "--bootstrap-server", bootstrap)
    assert out.strip() == f"created topic {topic!r} with 2 partitions, replication factor 3"
    for p in (0, 1):
        await wait_until(lambda p=p: _isr_size(cluster, topic, p, 3), f"{topic}-{p} fully in sync")
    described = await describe(cluster, topic)
    assert [(p["leader"], p["replicas"], sorted(p["isr"]), p["offline_replicas"]) for p in described["partitions"]] == [
        (1, [1, 2, 3], [1, 2, 3], []), (2, [2, 3, 1], [1, 2, 3], [])]

    cluster.kill(1)  # the preferred leader of partition 0 (and the first bootstrap server)
    await wait_until(lambda: _led_by_other_than(cluster, topic, 0, 1), f"{topic}-0 led by another broker", TIMEOUT_S)
    await wait_until(lambda: _isr_size(cluster, topic, 1, 2), f"broker 1 out of {topic}-1's ISR", TIMEOUT_S)
    described = await describe(cluster, topic)
    p0, p1 = described["partitions"]
    assert p0["leader"] in (2, 3) and sorted(p0["isr"]) == [2, 3] and p0["offline_replicas"] == [1]
    assert p1["leader"] == 2 and sorted(p1["isr"]) == [2, 3] and p1["offline_replicas"] == [1]
    assert p0["log_end_offset"] == 0  # its new leader answers ListOffsets
    whole = json.loads(await ok("cluster", "describe", "--json", "--bootstrap-server", bootstrap))
    assert sorted(b["id"] for b in whole["brokers"]) == [2, 3]
    under = {(p["topic"], p["partition"]): p for p in whole["under_replicated_partitions"]}
    assert under[(topic, 0)]["offline_replicas"] == [1] and under[(topic, 1)]["replicas"] == [2, 3, 1]
    assert whole["offline_partitions"] == []
    text = await ok("cluster", "describe", "--bootstrap-server", bootstrap)
    assert f"{topic}-0" in text and "under-replicated" in text

    await asyncio.to_thread(cluster.restart, 1)
    await wait_until(lambda: _isr_size(cluster, topic, 0, 3), f"broker 1 back in {topic}-0's ISR", TIMEOUT_S)
    assert await leader(bootstrap, topic, 0) != 1  # leadership stays where failover put it
    out = await ok("leader-election", "--election-type", "PREFERRED", "--topic", topic, "--partition", "0",
                   "--bootstrap-server", bootstrap)
    assert out.strip() == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0"
    assert await leader(bootstrap, topic, 0) == 1
    out = await ok("leader-election", "--election-type", "preferred", "--topic", topic, "--bootstrap-server", bootstrap)
    assert out.strip() == f"Valid replica already elected for partitions {topic}-0, {topic}-1"


async def test_unclean_election_of_a_led_partition_is_not_needed(cluster: kc.KafkaCluster, tmp_path: Any) -> None:
    topic = f"cli-unclean-{next(_names)}"
    await ok("topic", "create", topic, "--replication-factor", "3", "--bootstrap-server", cluster.bootstrap_servers)
    await wait_until(lambda: _isr_size(cluster, topic, 0, 3), f"{topic}-0 fully in sync")
    partitions = tmp_path / "partitions.json"
    partitions.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0}]}))
    out = await ok("leader-election", "--election-type", "unclean", "--path-to-json-file", str(partitions),
                   "--bootstrap-server", cluster.bootstrap_servers)
    assert out.strip() == f"Valid replica already elected for partitions {topic}-0"
    code, out, err = await pulllog("leader-election", "--election-type", "preferred", "--topic", topic,
                                   "--partition", "7", "--bootstrap-server", cluster.bootstrap_servers)
    assert code == 1 and err.startswith(f"Error completing leader election (PREFERRED) for partition {topic}-7: "), err
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err


async def _isr_size(cluster: kc.KafkaCluster, topic: str, partition: int, size: int) -> bool:
    isr = await in_sync(cluster.bootstrap_servers, topic, partition)
    return isr is not None and len(isr) == size


async def _led_by_other_than(cluster: kc.KafkaCluster, topic: str, partition: int, old: int) -> bool:
    now = await leader(cluster.bootstrap_servers, topic, partition)
    return now is not None and now != old


async def test_a_partition_whose_only_replica_is_down_is_offline(cluster: kc.KafkaCluster) -> None:
    """RF=1 on broker 3, broker 3 killed: the partition has no leader. topic describe shows it
    without offsets, cluster describe lists it offline, an unclean election has no replica to
    elect (one error line per partition, exit 1)."""
    topic = f"cli-offline-{next(_names)}"
    bootstrap = cluster.bootstrap_servers
    await ok("topic", "create", topic, "--replica-assignment", "3", "--bootstrap-server", bootstrap)
    await wait_until(lambda: _isr_size(cluster, topic, 0, 1), f"{topic}-0 led by broker 3")
    cluster.kill(3)
    await wait_until(lambda: _leaderless(cluster, topic), f"{topic}-0 has no leader", TIMEOUT_S)
    (p0,) = (await describe(cluster, topic))["partitions"]
    assert (p0["leader"], p0["replicas"], p0["offline_replicas"]) == (-1, [3], [3])
    assert (p0["log_start_offset"], p0["log_end_offset"], p0["size_bytes"]) == (-1, -1, None)
    text = await ok("topic", "describe", topic, "--bootstrap-server", bootstrap)
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == ["0"])
    assert row == ["0", "none", "3", *([] if not p0["isr"] else [",".join(map(str, p0["isr"]))]), "3", "?", "?", "?"]
    whole = json.loads(await ok("cluster", "describe", "--json", "--bootstrap-server", bootstrap))
    assert [(p["topic"], p["partition"], p["leader"]) for p in whole["offline_partitions"]
            if p["topic"] == topic] == [(topic, 0, -1)]
    assert all(p["topic"] != topic for p in whole["under_replicated_partitions"])
    code, out, err = await pulllog("leader-election", "--election-type", "unclean", "--topic", topic,
                                   "--partition", "0", "--bootstrap-server", bootstrap)
    assert code == 1 and out == "", (out, err)
    assert err.startswith(f"Error completing leader election (UNCLEAN) for partition {topic}-0: ") and \
        err.count("\n") == 1, err


async def _leaderless(cluster: kc.KafkaCluster, topic: str) -> bool:
    found = await partitions(cluster.bootstrap_servers, topic)
    return found is not None and (topic, 0) in found and found[(topic, 0)].leader < 0
