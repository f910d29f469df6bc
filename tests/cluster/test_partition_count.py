"""A coordinator hashes its keys over the internal topic's partition count, taken from the
topic's assignment (every view carries it), not from the views this broker holds: a
partition's view can arrive before its topic's others (a state watch's first read delivers
at once), and a broker that became the leader of ``__transaction_state``-1 while it knew
only partitions 0 and 1 took the transactional ids of partition 2 for its own, refusing
their Produce INVALID_PRODUCER_ID_MAPPING (tests/cluster/test_coordinators.py, now and
then under load)."""

from __future__ import annotations

import uuid
from pathlib import Path

import zk_cluster
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until

from pulllog.cluster.state import LeaderAndIsr, PartitionView
from pulllog.net.coordinator_keys import partition_for
from pulllog.testing import BrokerThread

TXN_STATE, TXN_ID = "__transaction_state", "pulllog-mover"


def test_a_coordinator_counts_the_partitions_its_views_do_not_hold_yet(
        zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> None:
    assert [partition_for(TXN_ID, n) for n in (2, 3)] == [1, 2]  # the case: hashed over 2, it is ours
    properties = {"zookeeper.connect": f"{zookeeper.connect}/count-{uuid.uuid4().hex[:8]}", "broker.id": "1",
                  "transaction.state.log.num.partitions": "3"}
    topic_id = uuid.uuid4()

    def view(partition: int, leader: int) -> PartitionView:
        return PartitionView(TXN_STATE, partition, topic_id, (leader,), LeaderAndIsr(leader, 0, (leader,), 1, 0),
                             {}, partition_count=3)

    with BrokerThread(tmp_path / "data", properties=properties) as broker, WireClient(broker.port) as client:
        # Partitions 0 (another broker's) and 1 (ours) of three have arrived; 2 has not yet.
        broker.call(lambda: broker.broker._apply_partition_views([view(0, 2), view(1, 1)], []))
        block_until(lambda: broker.call(lambda: (TXN_STATE, 1) in broker.broker.coordinating
                                        and not broker.broker.loading), "partition 1 is loaded")
        coordinator = broker.call(lambda: broker.broker.transactions)
        assert coordinator.state_partitions == 3
        assert broker.call(lambda: coordinator.ownership_error(TXN_ID)) == ErrorCode.not_coordinator
        found = client.call("find_coordinator", 4, {"key_type": 1, "coordinator_keys": [TXN_ID]}).coordinators[0]
        assert found.error_code == ErrorCode.coordinator_not_available  # partition 2's leader is not known yet
