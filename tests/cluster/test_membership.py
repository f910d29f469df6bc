"""Brokers register in a real ZooKeeper, elect one controller, and fail over when it dies."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import zk_cluster
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError
from waits import block_until
from zk_brokers import Cluster

PULLLOG = [sys.executable, "-m", "pulllog.cli.main"]


def _controller(zk_client: Any, cluster: Cluster) -> tuple[int, int] | None:
    """(controller id, controller epoch) as ZooKeeper has them, or None while there is none."""
    try:  # not exists() then get(): a dying controller's node can go in between
        data, _ = zk_client.get(cluster.path("/controller"))
    except NoNodeError:
        return None
    epoch, _ = zk_client.get(cluster.path("/controller_epoch"))
    return json.loads(data)["brokerid"], int(epoch)


def _metadata(bootstrap: str) -> tuple[dict[int, str], int]:
    """(broker id -> host:port, controller id) from a broker's Metadata answer, via librdkafka."""
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {b.id: f"{b.host}:{b.port}" for b in meta.brokers.values()}, meta.controller_id


def test_three_brokers_register_ephemeral_znodes_in_kafkas_format(cluster: Cluster, zk_client: Any) -> None:
    assert sorted(zk_client.get_children(cluster.path("/brokers/ids")), key=int) == ["1", "2", "3"]
    for broker_id, broker in cluster.brokers.items():
        data, stat = zk_client.get(cluster.path(f"/brokers/ids/{broker_id}"))
        assert stat.ephemeralOwner != 0  # goes with the broker's session
        znode = json.loads(data)
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        assert host == f"127.0.0.{broker_id}"
        assert znode["host"] == host and znode["port"] == int(port)
        assert znode["endpoints"] == [f"PLAINTEXT://{host}:{port}"]
        assert znode["version"] == 5 and znode["jmx_port"] == -1
        assert znode["timestamp"].isdigit()  # milliseconds, as a string (Kafka writes it so)


def test_one_controller_is_elected_with_an_epoch(cluster: Cluster, zk_client: Any) -> None:
    data, stat = zk_client.get(cluster.path("/controller"))
    controller = json.loads(data)
    assert stat.ephemeralOwner != 0
    assert controller["version"] == 1 and controller["timestamp"].isdigit()
    assert controller["brokerid"] == 1  # the first broker to start found no controller
    epoch, _ = zk_client.get(cluster.path("/controller_epoch"))
    assert int(epoch) == 1


def test_every_brokers_metadata_lists_all_brokers_and_the_controller(cluster: Cluster) -> None:
    expected = {broker_id: broker.bootstrap_servers for broker_id, broker in cluster.brokers.items()}
    for broker in cluster.brokers.values():
        assert _metadata(broker.bootstrap_servers) == (expected, 1)


def test_a_second_broker_with_a_live_brokers_id_is_refused_in_one_line(cluster: Cluster, tmp_path: Any) -> None:
    live = cluster.broker(2)
    result = subprocess.run([*PULLLOG, "serve", "--broker-id", "2", "--zookeeper", cluster.connect,
                             "--listen", "127.0.0.4:0", "--data-dir", str(tmp_path / "dup")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        (f"error: broker.id 2 is already registered in ZooKeeper ({cluster.connect}/brokers/ids/2) by the broker "
         f"at {live.bootstrap_servers}; give this broker another --broker-id, or stop that one first")]
    assert "Traceback" not in result.stderr
    # the live broker keeps its registration
    assert _metadata(live.bootstrap_servers)[0][2] == live.bootstrap_servers


def test_cluster_describe_lists_the_brokers_and_the_controller(cluster: Cluster) -> None:
    out = subprocess.run([*PULLLOG, "cluster", "describe", "--bootstrap-server", cluster.broker(3).bootstrap_servers,
                          "--json"], capture_output=True, text=True, timeout=120, check=True).stdout
    described = json.loads(out)
    assert described["controller"] == 1
    assert [(b["id"], f"{b['host']}:{b['port']}") for b in described["brokers"]] == [
        (broker_id, broker.bootstrap_servers) for broker_id, broker in sorted(cluster.brokers.items())]


def test_when_the_controller_is_killed_another_broker_takes_over_with_a_higher_epoch(
        own_cluster: Cluster, zk_client: Any) -> None:
    # A short session, so ZooKeeper notices the SIGKILLed broker in ~2 s instead of 18.
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000",)
    own_cluster.start(3)
    # Whichever broker won the first election (broker 1 only if it got there first) is killed.
    controller, epoch = block_until(lambda: _controller(zk_client, own_cluster), "a controller is elected")
    own_cluster.broker(controller).kill()
    new_controller, new_epoch = block_until(
        lambda: (c := _controller(zk_client, own_cluster)) is not None and c[0] != controller and c,
        "another broker is the controller")
    survivor_ids = sorted(set(own_cluster.brokers) - {controller})
    assert new_controller in survivor_ids and new_epoch > epoch
    assert sorted(zk_client.get_children(own_cluster.path("/brokers/ids")), key=int) == [str(b) for b in survivor_ids]
    # The survivors' Metadata follows: two brokers, the new controller.
    survivors = {b: own_cluster.broker(b).bootstrap_servers for b in survivor_ids}
    for broker_id, bootstrap in survivors.items():
        block_until(lambda bootstrap=bootstrap: _metadata(bootstrap) == (survivors, new_controller),
                    f"broker {broker_id}'s Metadata shows the new cluster", interval_s=0.2)


def test_a_broker_stopped_cleanly_leaves_at_once_and_the_controller_moves(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.start(2)
    assert own_cluster.broker(1).stop() == 0
    # No session timeout to wait for (18 s by default): closing the session deletes the znodes.
    assert zk_client.get_children(own_cluster.path("/brokers/ids")) == ["2"]
    assert block_until(lambda: _controller(zk_client, own_cluster), "broker 2 is elected") == (2, 2)


def test_a_broker_that_cannot_reach_zookeeper_stops_with_one_line(tmp_path: Any) -> None:
    port = zk_cluster.free_port()  # nothing listens there
    result = subprocess.run([*PULLLOG, "serve", "--broker-id", "1", "--zookeeper", f"127.0.0.1:{port}",
                             "--override", "zookeeper.connection.timeout.ms=1000",
                             "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        (f"error: cannot reach ZooKeeper at 127.0.0.1:{port} within 1 s (zookeeper.connection.timeout.ms); "
         "is it running there?")]
    assert "Traceback" not in result.stderr


def test_describe_cluster_from_a_kafka_admin_client_lists_the_brokers_and_the_controller(cluster: Cluster) -> None:
    # confluent-kafka's describe_cluster sends DescribeCluster (60), not Metadata.
    admin = AdminClient({"bootstrap.servers": cluster.broker(2).bootstrap_servers})
    described = admin.describe_cluster(request_timeout=30).result()
    assert described.controller.id == 1
    assert sorted((n.id, f"{n.host}:{n.port}") for n in described.nodes) == [
        (broker_id, broker.bootstrap_servers) for broker_id, broker in sorted(cluster.brokers.items())]
