"""A cluster member's group coordinator answers a write of group metadata only once the ISR of
its ``__consumer_offsets`` partition has it (acks=all, as Kafka's storeGroup and offset commits
append): SyncGroup (the group's record with the assignment) and OffsetCommit wait while an
in-sync follower is paused (SIGSTOP) and answer once it has fetched the record (issue 16)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until
from zk_brokers import Cluster

GROUP, TOPIC = "g", "t"
OVERRIDES = ("offsets.topic.replication.factor=2", "offsets.topic.num.partitions=1",
             "group.initial.rebalance.delay.ms=0")


def _offsets_size(data_dir: Path) -> int:
    """Bytes in the broker's __consumer_offsets-0 segments: grows when the record is appended."""
    return sum(p.stat().st_size for p in (data_dir / "__consumer_offsets-0").glob("*.log"))


def _join(client: WireClient, member_id: str) -> Any:
    return client.call("join_group", 5, {
        "group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})


def test_sync_group_and_offset_commit_answer_once_the_isr_has_the_record(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = OVERRIDES
    own_cluster.start(2)
    host, port = own_cluster.broker(1).bootstrap_servers.rsplit(":", 1)
    with WireClient(int(port), host) as client:
        found = block_until(lambda: (c := client.call("find_coordinator", 4, {
            "key_type": 0, "coordinator_keys": [GROUP]}).coordinators[0]).error_code == 0 and c,
            "the group's coordinator is elected")
        leader_id = int(found.node_id)
    state_path = own_cluster.path("/brokers/topics/__consumer_offsets/partitions/0/state")
    block_until(lambda: sorted(json.loads(zk_client.get(state_path)[0])["isr"]) == [1, 2], "both replicas in sync")
    leader, follower = own_cluster.broker(leader_id), own_cluster.broker(3 - leader_id)
    assert follower.proc is not None
    host, port = leader.bootstrap_servers.rsplit(":", 1)
    with WireClient(int(port), host, timeout=60) as client:
        client.call("create_topics", 7, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 2,
                                                     "assignments": [], "configs": []}],
                                         "timeout_ms": 30_000, "validate_only": False})
        member_id = _join(client, "").member_id
        joined = _join(client, member_id)
        assert (joined.error_code, joined.leader) == (ErrorCode.none, member_id)

        os.kill(follower.proc.pid, signal.SIGSTOP)
        try:
            before = _offsets_size(leader.data_dir)
            client.send("sync_group", 5, {
                "group_id": GROUP, "generation_id": joined.generation_id, "member_id": member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": [{"member_id": member_id, "assignment": b"mine"}]})
            block_until(lambda: _offsets_size(leader.data_dir) > before, "the leader appends the group's record")
            assert not client.has_answer()  # appended, not replicated: no answer yet
        finally:
            os.kill(follower.proc.pid, signal.SIGCONT)
        _correlation, synced = client.receive("sync_group", 5)
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")

        os.kill(follower.proc.pid, signal.SIGSTOP)
        try:
            before = _offsets_size(leader.data_dir)
            client.send("offset_commit", 8, {
                "group_id": GROUP, "generation_id_or_member_epoch": joined.generation_id, "member_id": member_id,
                "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]})
            block_until(lambda: _offsets_size(leader.data_dir) > before, "the leader appends the offset")
            assert not client.has_answer()
        finally:
            os.kill(follower.proc.pid, signal.SIGCONT)
        _correlation, committed = client.receive("offset_commit", 8)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
