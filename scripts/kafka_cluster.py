#!/usr/bin/env python3
"""A real 3-broker Apache Kafka cluster (KRaft) on 127.0.0.1, 127.0.0.2 and 127.0.0.3.

The reference for how clients behave across brokers: pulllog's clients are tested against
it for leader and coordinator failover before pulllog's own cluster exists
(tests/cluster_clients/). Each node N (1, 2, 3) is one JVM, broker and KRaft controller at
once (``process.roles=broker,controller``; the three form the controller quorum, so any one
of them may die and the other two still elect), listening on 127.0.0.N with the same two
ports on every address (``PORT`` for clients, ``PORT+`` for the controller quorum). The jars
come from scripts/kafka_reference.py's Maven cache, the JVM options (small heap, C1 only)
too, so a node starts in a few seconds.

Settings chosen for failover tests, each Kafka's own name:

    broker.session.timeout.ms=3000, broker.heartbeat.interval.ms=500
        a SIGKILLed broker is fenced, and its partitions get new leaders, within ~3 s
        (Kafka's default is 9 s)
    default.replication.factor=3, min.insync.replicas=2, offsets.topic.replication.factor=3,
    transaction.state.log.replication.factor=3, transaction.state.log.min.isr=2
        everything replicated, acks=all needs two copies
    auto.leader.rebalance.enable=false
        leadership stays where failover put it until a preferred leader election asks

From the command line::

    python scripts/kafka_cluster.py serve [--data-dir D]   # until Ctrl-C; prints bootstrap.servers and PIDs
    python scripts/kafka_cluster.py serve --data-dir D     # again: the same cluster, same addresses

From Python (the pytest fixture ``kafka_cluster`` in tests/cluster_clients/conftest.py)::

    cluster = KafkaCluster(tmp_dir).start()
    cluster.bootstrap_servers          # "127.0.0.1:P,127.0.0.2:P,127.0.0.3:P"
    cluster.kill(2)                    # SIGKILL by PID, waits for the process to end
    cluster.shutdown(2)                # SIGTERM: a controlled shutdown (leadership moved first)
    cluster.restart(2)                 # the same node id, data and addresses
    cluster.stop()                     # every node, by PID
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_reference  # noqa: E402

NODE_IDS = (1, 2, 3)
STOP_GRACE_S = 10.0

# Kafka's names; see the module docstring for why each.
CLUSTER_SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "auto.leader.rebalance.enable": "false",
    "unclean.leader.election.enable": "false",
}


def host_of(node_id: int) -> str:
    return f"127.0.0.{node_id}"


def _free_on_all(count: int) -> list[int]:
    """``count`` consecutive-free ports, each free on every node's address."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        ports = [base + i for i in range(count)]
        if ports[-1] < 65536 and all(_free(host_of(n), p) for n in NODE_IDS for p in ports):
            return ports


def _free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class KafkaNode:
    """One JVM: broker and controller ``node_id`` on 127.0.0.``node_id``."""

    node_id: int
    data_dir: Path
    port: int
    controller_port: int
    voters: str
    overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return host_of(self.node_id)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.address},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.address}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            **CLUSTER_SETTINGS,
        }
        props.update(self.overrides)
        return props

    def format(self, cluster_id: str, libs: Path) -> subprocess.Popen[str]:
        """Write server.properties and start kafka-storage format (the caller waits for it)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return subprocess.Popen(kafka_reference.java_command("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                                             "-c", str(self.config_path), libs=libs),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def launch(self, libs: Path) -> None:
        """Start the JVM (not waiting for it to serve)."""
        with open(self.data_dir / "kafka.out", "ab") as out:
            self.process = subprocess.Popen(kafka_reference.java_command("kafka.Kafka", str(self.config_path), libs=libs),
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL by PID (no controlled shutdown: the cluster learns of it by the missed
        heartbeats), and wait for the process to end."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    def wait_or_kill(self, timeout_s: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return (self.data_dir / "kafka.out").read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


class KafkaCluster:
    """Three KRaft nodes; see the module docstring."""

    def __init__(self, data_dir: Path, *, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        ports_file = self.data_dir / "ports"
        if ports_file.exists():  # an existing cluster's data: same addresses
            port, controller_port = (int(x) for x in ports_file.read_text().split())
        else:
            port, controller_port = _free_on_all(2)
        self.port, self.controller_port = port, controller_port
        voters = ",".join(f"{n}@{host_of(n)}:{controller_port}" for n in NODE_IDS)
        self.nodes = {n: KafkaNode(n, self.data_dir / f"node{n}", port, controller_port, voters, self.overrides)
                      for n in NODE_IDS}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    def start(self, timeout_s: float = 120.0) -> "KafkaCluster":
        libs = kafka_reference.fetch_jars()
        ports_file = self.data_dir / "ports"
        if not ports_file.exists():
            cluster_id = kafka_reference._cluster_id()
            # one JVM each: formatting them side by side halves the start
            formats = {n: node.format(cluster_id, libs) for n, node in self.nodes.items()}
            for n, fmt in formats.items():
                out, _ = fmt.communicate()
                if fmt.returncode != 0:
                    raise RuntimeError(f"kafka-storage format of node {n} failed: {out}")
            ports_file.write_text(f"{self.port} {self.controller_port}\n")
        for node in self.nodes.values():
            node.launch(libs)
        try:
            self.wait_serving(NODE_IDS, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def shutdown(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM by PID: Kafka's controlled shutdown (leadership moved away first), and
        wait for the process to end (SIGKILL after ``timeout_s``)."""
        node = self.nodes[node_id]
        node.terminate()
        node.wait_or_kill(timeout_s)

    def restart(self, node_id: int, timeout_s: float = 120.0) -> None:
        """Start a stopped node again (same id, data, addresses) and wait until it serves."""
        node = self.nodes[node_id]
        if node.alive:
            raise RuntimeError(f"node {node_id} is running (pid {node.process.pid})")  # type: ignore[union-attr]
        node.launch(kafka_reference.fetch_jars())
        self.wait_serving((node_id,), timeout_s)

    def wait_serving(self, node_ids: tuple[int, ...] | list[int], timeout_s: float) -> None:
        """Until each node answers Metadata listing every live node (a state, not a delay)."""
        deadline = time.monotonic() + timeout_s
        live = sum(1 for node in self.nodes.values() if node.alive)
        for node_id in node_ids:
            node = self.nodes[node_id]
            while _brokers_listed(node.host, node.port) < live:
                if not node.alive:
                    raise RuntimeError(f"Kafka node {node_id} exited with {node.process.returncode}:\n"  # type: ignore[union-attr]
                                       f"{node.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka node {node_id} did not serve within {timeout_s:.0f} s:\n{node.log_tail()}")
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop every node by PID: SIGTERM to all at once, SIGKILL to any still running after
        ``STOP_GRACE_S`` (the last nodes of a quorum cannot finish a controlled shutdown)."""
        for node in self.nodes.values():
            node.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for node in self.nodes.values():
            node.wait_or_kill(max(deadline - time.monotonic(), 0.1))


def _brokers_listed(host: str, port: int) -> int:
    """How many brokers a Metadata v1 answer from ``host:port`` lists (0: no answer)."""
    request_body = b"\xff\xff\xff\xff"  # Metadata v1: topics = null (all)
    client_id = b"pulllog-cluster-probe"
    header = (3).to_bytes(2, "big") + (1).to_bytes(2, "big") + (1).to_bytes(4, "big")
    header += len(client_id).to_bytes(2, "big") + client_id
    payload = header + request_body
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(len(payload).to_bytes(4, "big") + payload)
            size = int.from_bytes(kafka_reference._read_exactly(s, 4), "big")
            body = kafka_reference._read_exactly(s, size)
    except OSError:
        return 0
    return int.from_bytes(body[4:8], "big", signed=True) if len(body) >= 8 else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the 3-node cluster until Ctrl-C")
    serve.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    import tempfile
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="kafka-cluster-"))
    try:
        cluster = KafkaCluster(data_dir).start()
    except kafka_reference.ReferenceUnavailable as exc:
        print(f"kafka_cluster: {exc}", file=sys.stderr)
        return 2
    pids = ", ".join(f"node {n}: pid {node.process.pid}" for n, node in cluster.nodes.items())  # type: ignore[union-attr]
    print(f"Apache Kafka {kafka_reference.KAFKA_VERSION}, 3 nodes serving: bootstrap.servers={cluster.bootstrap_servers} "
          f"({pids}; data in {data_dir}); Ctrl-C stops them", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
