"""A broker whose ZooKeeper session expires registers again and runs for controller again.

Its session is expired the way ZooKeeper's own tests do it: a second client joins the same
session (its id and password) and closes it, so ZooKeeper ends the session and deletes its
ephemeral znodes, as it would after a network partition longer than the session timeout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from waits import wait_until
from zk_brokers import Cluster

from pulllog.broker import Broker


async def test_a_broker_whose_session_expired_registers_again_and_becomes_controller_again(
        own_cluster: Cluster, zk_client: Any, tmp_path: Path) -> None:
    async with Broker(tmp_path / "data", port=0, node_id=5, zookeeper_connect=own_cluster.connect,
                      zookeeper_session_timeout_ms=4000) as broker:
        assert broker.membership is not None and broker.cluster_view is not None
        assert broker.cluster_view.controller_id == 5
        registration = own_cluster.path("/brokers/ids/5")
        _, stat = zk_client.get(registration)
        old_session = stat.ephemeralOwner
        epoch = int(zk_client.get(own_cluster.path("/controller_epoch"))[0])

        session_id, password = broker.membership._client.client_id
        intruder = KazooClient(hosts=own_cluster.connect.partition("/")[0], client_id=(session_id, password))
        intruder.start(timeout=30)
        intruder.stop()  # closes the broker's session: its ephemeral znodes go
        intruder.close()

        def registered_again() -> bool:
            found = zk_client.exists(registration)
            return found is not None and found.ephemeralOwner not in (0, old_session)

        await wait_until(registered_again, "broker 5 is registered under a new session")
        await wait_until(lambda: zk_client.exists(own_cluster.path("/controller")) is not None and json.loads(
            zk_client.get(own_cluster.path("/controller"))[0])["brokerid"] == 5, "broker 5 is the controller again")
        assert int(zk_client.get(own_cluster.path("/controller_epoch"))[0]) == epoch + 1
        await wait_until(lambda: broker.cluster_view is not None and broker.cluster_view.controller_id == 5
                         and [b.broker_id for b in broker.cluster_view.brokers] == [5],
                         "the broker's own view shows it registered and controller again")
    assert zk_client.exists(registration) is None  # left at once on a clean stop
