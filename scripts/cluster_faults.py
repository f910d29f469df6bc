#!/usr/bin/env python3
"""Leader kills under load on a three-broker cluster: issue 16's fault run.

A private ZooKeeper and ``pulllog serve`` brokers 1-3 on 127.0.0.1-3 (scripts/zk_cluster.py);
a topic with replication factor 3 and min.insync.replicas=2; an idempotent librdkafka producer
(acks=all) writing keyed records with a sequence number per partition (value
``<partition>-<seq>``, partition chosen explicitly, round robin) from its own thread, as fast as
its in-flight cap allows. The faults are driven by state, not by the clock: after a random
number of further acknowledged records (seeded, the seed printed), the leader of a random
partition (its state znode says which broker) is SIGKILLed; once its registration znode is gone
(its session timed out, the controller elected another leader) it is restarted, and the next
round starts once every partition's ISR is full again.

At the end the producer flushes, the cluster settles (every ISR full) and:

* reading each partition from its leader up to the high watermark, every acknowledged record is
  at the offset its acknowledgement named, and the sequence numbers are strictly increasing
  (in order, none twice);
* every replica's log, read from its segment files, is the same list of batches, byte for byte
  (waited for: the followers fetch what the leader still has beyond their log end).

tests/cluster/test_cluster_faults.py runs this with 3 kills; by hand::

    python scripts/cluster_faults.py [--kills 10] [--partitions 3] [--seed N] [--session-timeout-ms 2000]
    python scripts/cluster_faults.py --fault rolling-restart [--override controlled.shutdown.enable=false]

A rolling restart also prints the longest time without an acknowledgement from the first stop
to the last full ISR, and (with controlled shutdown, the default) checks that each broker led
no partition and was in no ISR when its process exited.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zk_cluster

TOPIC = "faults"
IN_FLIGHT_CAP = 2000
_BATCH_HEADER = struct.Struct(">qi")  # a record batch's baseOffset and batchLength


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 120.0, interval_s: float = 0.02) -> Any:
    """Poll ``condition`` until it is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting until {what} (last: {value!r})")
        time.sleep(interval_s)


@dataclass
class Acks:
    """What the producer's delivery reports said: (partition, seq) -> offset, and the errors."""

    offsets: dict[tuple[int, int], int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The longest time between two acknowledgements while ``watching`` (set around a fault).
    watching: bool = False
    last_at: float = 0.0
    longest_gap_s: float = 0.0

    def count(self) -> int:
        with self.lock:
            return len(self.offsets)


class LoadProducer:
    """An idempotent acks=all librdkafka producer writing ``<partition>-<seq>`` from a thread."""

    def __init__(self, bootstrap: str, partitions: int, config: dict[str, Any] | None = None) -> None:
        from confluent_kafka import Producer

        self.partitions = partitions
        self.acks = Acks()
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            # Long enough that no record times out while a leader is being replaced.
            "message.timeout.ms": 300_000,
            **(config or {}),
        })
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-producer", daemon=True)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            with self.acks.lock:
                self.acks.errors.append(str(err))
            return
        partition, seq = (int(x) for x in msg.value().decode().split("-"))
        now = time.monotonic()
        with self.acks.lock:
            self.acks.offsets[(partition, seq)] = msg.offset()
            if self.acks.watching:
                self.acks.longest_gap_s = max(self.acks.longest_gap_s, now - self.acks.last_at)
            self.acks.last_at = now

    def _run(self) -> None:
        seqs = [0] * self.partitions
        i = 0
        while not self._stop.is_set():
            if len(self._producer) >= IN_FLIGHT_CAP:
                self._producer.poll(0.05)
                continue
            partition = i % self.partitions
            value = f"{partition}-{seqs[partition]}".encode()
            try:
                self._producer.produce(TOPIC, key=f"k{partition}".encode(), value=value, partition=partition,
                                       on_delivery=self._delivered)
            except BufferError:
                self._producer.poll(0.05)
                continue
            seqs[partition] += 1
            i += 1
            self._producer.poll(0)

    def stop(self, flush_timeout_s: float = 300.0) -> int:
        """Stop producing and wait for every delivery report; the number still unreported."""
        self._stop.set()
        self._thread.join()
        return self._producer.flush(flush_timeout_s)


class FaultCluster:
    """A running cluster's view for the faults: ZooKeeper reads and broker handles."""

    def __init__(self, brokers: dict[int, zk_cluster.BrokerProcess], zk: Any, chroot: str) -> None:
        self.brokers = brokers
        self.zk = zk
        self.chroot = chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers.values())

    def state(self, partition: int) -> dict[str, Any]:
        # retry: across a ZooKeeper restart the session reconnects (ConnectionLoss meanwhile)
        data, _stat = self.zk.retry(self.zk.get, f"{self.chroot}/brokers/topics/{TOPIC}/partitions/{partition}/state")
        return json.loads(data)

    def registered(self, broker_id: int) -> bool:
        return self.zk.retry(self.zk.exists, f"{self.chroot}/brokers/ids/{broker_id}") is not None

    def led_at_exit(self, broker_id: int, partitions: int) -> list[str]:
        """Right after ``broker_id``'s process exited cleanly: the partitions it still led, or
        whose last leadership write came after its registration went (ZooKeeper's order of
        writes: the state's mzxid against /brokers/ids' pzxid, its last child change). With a
        controlled shutdown every partition was handed over before it left."""
        left_at = self.zk.retry(self.zk.exists, f"{self.chroot}/brokers/ids").pzxid
        problems = []
        for partition in range(partitions):
            path = f"{self.chroot}/brokers/topics/{TOPIC}/partitions/{partition}/state"
            data, stat = self.zk.retry(self.zk.get, path)
            state = json.loads(data)
            if state["leader"] == broker_id or broker_id in state["isr"] or stat.mzxid > left_at:
                problems.append(f"partition {partition} was not handed over before broker {broker_id} exited: "
                                f"{state} (written at zxid {stat.mzxid}, the broker left at {left_at})")
        return problems

    def isr_full(self, partitions: int) -> bool:
        everyone = set(self.brokers)
        return all(set(self.state(p)["isr"]) == everyone and self.state(p)["leader"] in everyone
                   for p in range(partitions))


def create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=60)[TOPIC].result()


def kill_leaders(cluster: FaultCluster, load: LoadProducer, kills: int, rng: random.Random,
                 min_acks: int, max_acks: int, log: Callable[[str], None] = print) -> list[tuple[int, int]]:
    """``kills`` rounds of: wait for a random number of further acks, SIGKILL a random
    partition's leader, restart it once its session is gone, wait for a full ISR. Returns
    (partition, killed broker) per round."""
    killed: list[tuple[int, int]] = []
    for round_no in range(1, kills + 1):
        target = load.acks.count() + rng.randint(min_acks, max_acks)
        wait_for(lambda t=target: load.acks.count() >= t, f"{target} records are acknowledged")
        partition = rng.randrange(load.partitions)
        leader = cluster.state(partition)["leader"]
        started = time.monotonic()
        cluster.brokers[leader].kill()
        log(f"round {round_no}: SIGKILL broker {leader} (leader of {TOPIC}-{partition}) "
            f"at {load.acks.count()} acks")
        wait_for(lambda b=leader: not cluster.registered(b), f"broker {leader}'s registration is gone")
        wait_for(lambda p=partition, b=leader: cluster.state(p)["leader"] not in (b, -1),
                 f"{TOPIC}-{partition} has a new leader")
        at = load.acks.count()
        wait_for(lambda a=at: load.acks.count() > a, "the new leaders acknowledge writes")
        cluster.brokers[leader].start()
        wait_for(lambda: cluster.isr_full(load.partitions), "every ISR is full again")
        log(f"round {round_no}: broker {leader} back in every ISR after {time.monotonic() - started:.1f} s, "
            f"{load.acks.count()} acks")
        killed.append((partition, leader))
    return killed


def read_partitions(bootstrap: str, partitions: int) -> dict[int, dict[int, int]]:
    """Each partition read from its leader up to its high watermark: offset -> seq."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-check", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        def high_watermarks() -> dict[int, int] | None:
            # A broker whose view still moves (the controller re-electing after a ZooKeeper
            # restart) may answer a moment without a leader: ask again.
            try:
                return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                        for p in range(partitions)}
            except KafkaException:
                return None

        ends = wait_for(high_watermarks, "every partition's leader answers its high watermark")
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        got: dict[int, dict[int, int]] = {p: {} for p in range(partitions)}

        def done() -> bool:
            for message in consumer.consume(10_000, 0.5):
                if message.error() is None:
                    got[message.partition()][message.offset()] = int(message.value().decode().split("-")[1])
            return all(not ends[p] or max(got[p], default=-1) >= ends[p] - 1 for p in range(partitions))

        wait_for(done, f"every partition is read up to its high watermark {ends}", interval_s=0)
        return got
    finally:
        consumer.close()


def check_acknowledged(acks: Acks, read: dict[int, dict[int, int]]) -> list[str]:
    """Every acknowledged record at its offset; per partition strictly increasing seqs."""
    problems: list[str] = []
    for (partition, seq), offset in sorted(acks.offsets.items()):
        found = read[partition].get(offset)
        if found != seq:
            problems.append(f"acknowledged {partition}-{seq} at offset {offset}, but the log has {found!r} there")
    for partition, by_offset in read.items():
        seqs = [by_offset[o] for o in sorted(by_offset)]
        for before, after in itertools.pairwise(seqs):
            if after <= before:
                problems.append(f"partition {partition}: seq {after} follows {before} (out of order or twice)")
    return problems[:20]


def segment_batches(partition_dir: Path) -> list[bytes]:
    """The record batches of a replica's segment files, in offset order, each as its bytes."""
    batches: list[bytes] = []
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        position = 0
        while position + _BATCH_HEADER.size <= len(data):
            _base, length = _BATCH_HEADER.unpack_from(data, position)
            end = position + _BATCH_HEADER.size + length
            if length <= 0 or end > len(data):
                break  # a torn tail being written right now: read again
            batches.append(data[position:end])
            position = end
    return batches


def replicas_identical(cluster: FaultCluster, partitions: int) -> str:
    """'' when every partition's replicas hold the same batches, else what differs."""
    for partition in range(partitions):
        logs = {broker_id: segment_batches(broker.data_dir / f"{TOPIC}-{partition}")
                for broker_id, broker in cluster.brokers.items()}
        first_id, first = next(iter(logs.items()))
        for broker_id, batches in logs.items():
            if batches != first:
                at = next((i for i, (a, b) in enumerate(zip(first, batches)) if a != b), min(len(first), len(batches)))
                return (f"{TOPIC}-{partition}: broker {broker_id} has {len(batches)} batches, broker {first_id} "
                        f"{len(first)}; first difference at batch {at}")
    return ""


def restart_zookeeper(cluster: FaultCluster, zookeeper: zk_cluster.ZooKeeper, load: LoadProducer,
                      rng: random.Random, min_acks: int, max_acks: int,
                      log: Callable[[str], None] = print) -> list[tuple[int, int]]:
    """After a random number of acks, SIGKILL ZooKeeper and start it again (same port, same
    data), then wait for more acks and a full ISR everywhere."""
    target = load.acks.count() + rng.randint(min_acks, max_acks)
    wait_for(lambda: load.acks.count() >= target, f"{target} records are acknowledged")
    assert zookeeper.proc is not None
    zookeeper.proc.kill()  # by its PID (Popen.kill is SIGKILL)
    zookeeper.proc.wait()
    log(f"ZooKeeper SIGKILLed at {load.acks.count()} acks")
    at = load.acks.count()
    wait_for(lambda: load.acks.count() > at + min_acks, "records are acknowledged while ZooKeeper is down")
    zookeeper.start()
    log(f"ZooKeeper back at {load.acks.count()} acks")
    at = load.acks.count()
    wait_for(lambda: all(cluster.registered(b) for b in cluster.brokers), "every broker is registered again")
    wait_for(lambda: load.acks.count() > at + min_acks, "records are acknowledged after ZooKeeper's return")
    wait_for(lambda: cluster.isr_full(load.partitions), "every ISR is full")
    return []


def rolling_restart(cluster: FaultCluster, load: LoadProducer, rng: random.Random, min_acks: int,
                    max_acks: int, log: Callable[[str], None] = print,
                    problems: list[str] | None = None) -> list[tuple[int, int]]:
    """Each broker in turn, after a random number of acks: a clean stop (SIGTERM), a restart,
    and a full ISR everywhere before the next. Unless ``problems`` is None, what
    :meth:`FaultCluster.led_at_exit` finds right after each exit goes there (a controlled
    shutdown hands every partition over first). The longest time without an acknowledgement
    from the first stop to the last full ISR is ``load.acks.longest_gap_s``."""
    stopped: list[tuple[int, int]] = []
    for broker_id, broker in sorted(cluster.brokers.items()):
        target = load.acks.count() + rng.randint(min_acks, max_acks)
        wait_for(lambda t=target: load.acks.count() >= t, f"{target} records are acknowledged")
        with load.acks.lock:
            load.acks.watching = True
        broker.stop()
        log(f"broker {broker_id} stopped at {load.acks.count()} acks")
        if problems is not None:
            problems += cluster.led_at_exit(broker_id, load.partitions)
        wait_for(lambda b=broker_id: not cluster.registered(b), f"broker {broker_id}'s registration is gone")
        broker.start()
        wait_for(lambda: cluster.isr_full(load.partitions), "every ISR is full again")
        log(f"broker {broker_id} back in every ISR at {load.acks.count()} acks")
        stopped.append((-1, broker_id))
    with load.acks.lock:
        load.acks.watching = False
    return stopped


class BlackholeProxy:
    """A TCP proxy on loopback that can blackhole: while cut, bytes both ways are read and
    dropped (no reset, no answer: what a network partition looks like to both ends). On healing,
    the connections opened before or during the cut are closed (their streams lost bytes), and
    new ones are forwarded again."""

    def __init__(self, listen_host: str, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server((listen_host, 0))
        self.address = self._server.getsockname()[:2]
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def hostport(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        with self._lock:
            old, self._sockets = self._sockets, []
        self._cut.clear()
        for sock in old:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._server.close()
        self.heal()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self._cut.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def stale_produce(host: str, port: int, value: bytes, timeout_ms: int) -> int:
    """One acks=all Produce of ``value`` straight to a broker's own port (past its proxy): the
    error code of the answer, or -1 when none came within timeout_ms + 5 s."""
    import asyncio

    from pulllog.client.connection import KafkaConnection
    from pulllog.records import build_batch

    async def send() -> int:
        conn = await KafkaConnection.connect(host, port)
        try:
            response = await asyncio.wait_for(conn.request("produce", 9, {
                "transactional_id": None, "acks": -1, "timeout": timeout_ms,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}],
            }), timeout_ms / 1000 + 5)
            return int(response.responses[0].partition_responses[0].error_code)
        except TimeoutError:
            return -1
        finally:
            await conn.close()

    return asyncio.run(send())


class ProxiedBroker(zk_cluster.BrokerProcess):
    """Broker 1 behind proxies: its listener on a port of its own, advertised (in ZooKeeper and
    Metadata) as its Kafka proxy's, and its ZooKeeper session through its ZooKeeper proxy."""

    real_port: int = 0

    def spawn(self) -> Any:
        import subprocess

        args = [sys.executable, "-m", "pulllog.cli.main", "serve", "--broker-id", str(self.broker_id),
                "--zookeeper", self.zookeeper_connect, "--listen", f"{self.host}:{self.real_port}",
                "--data-dir", str(self.data_dir)]
        for item in self.overrides:
            args += ["--override", item]
        return subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                text=True)


STALE_VALUE = b"0-999999999999"  # a seq past any the producer reaches: read back, it breaks the order


def cut_off_leader(zookeeper: zk_cluster.ZooKeeper, chroot: str, base_dir: Path, zk: Any, seed: int,
                   min_acks: int, max_acks: int, session_timeout_ms: int = 2000,
                   log: Callable[[str], None] = print) -> Outcome:
    """Broker 1 leads a one-partition RF=3 topic under load; then it is cut off from the other
    brokers, the clients and ZooKeeper. It must drop out of the ISR (the controller elects
    another leader once its session expires), must not acknowledge an acks=all write sent to it
    as a stale leader, and must rejoin the ISR with the new leader's log once the cut heals."""
    rng = random.Random(seed)
    overrides = (f"zookeeper.session.timeout.ms={session_timeout_ms}",)
    real_port = zk_cluster.free_port("127.0.0.1")
    kafka_proxy = BlackholeProxy("127.0.0.1", ("127.0.0.1", real_port))
    zk_proxy = BlackholeProxy("127.0.0.1", (zookeeper.host, zookeeper.port))
    one = ProxiedBroker(1, base_dir / "broker-1", zk_proxy.hostport + chroot, host="127.0.0.1",
                        overrides=(*overrides, f"advertised.listeners=PLAINTEXT://{kafka_proxy.hostport}"))
    one.real_port = real_port
    brokers: dict[int, zk_cluster.BrokerProcess] = {}
    problems: list[str] = []
    try:
        brokers[1] = one.start()
        for broker_id in (2, 3):
            brokers[broker_id] = zk_cluster.BrokerProcess(broker_id, base_dir / f"broker-{broker_id}",
                                                          zookeeper.connect + chroot, overrides=overrides).start()
        zk_cluster.wait_for_membership(list(brokers.values()))  # else CreateTopics may not know broker 3 yet
        cluster = FaultCluster(brokers, zk, chroot)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})],
                            operation_timeout=60)[TOPIC].result()
        wait_for(lambda: cluster.isr_full(1), "the ISR is full")
        # A request to the blackholed broker times out sooner than librdkafka's default 30 s, so
        # the producer moves to the new leader within a CI test's time.
        load = LoadProducer(cluster.bootstrap, 1, {"request.timeout.ms": 5000, "socket.timeout.ms": 5000}).start()
        started = time.monotonic()
        try:
            target = rng.randint(min_acks, max_acks)
            wait_for(lambda: load.acks.count() >= target, f"{target} records are acknowledged")
            kafka_proxy.cut()
            zk_proxy.cut()
            log(f"{time.monotonic() - started:.1f} s: broker 1 cut off at {load.acks.count()} acks")
            wait_for(lambda: cluster.state(0)["leader"] in (2, 3) and 1 not in cluster.state(0)["isr"],
                     "another leader is elected and broker 1 is out of the ISR")
            log(f"{time.monotonic() - started:.1f} s: state after the cut: {cluster.state(0)}")
            code = stale_produce("127.0.0.1", real_port, STALE_VALUE, timeout_ms=3000)
            log(f"acks=all Produce to the cut-off broker 1: error code {code}")
            if code == 0:
                problems.append("the cut-off stale leader acknowledged an acks=all write")
            at = load.acks.count()
            wait_for(lambda: load.acks.count() > at + min_acks, "the new leader acknowledges writes")
            kafka_proxy.heal()
            zk_proxy.heal()
            log(f"{time.monotonic() - started:.1f} s: cut healed at {load.acks.count()} acks")
            wait_for(lambda: cluster.isr_full(1), "broker 1 is back in the ISR")
            log(f"{time.monotonic() - started:.1f} s: broker 1 back in the ISR: {cluster.state(0)}")
            at = load.acks.count()
            wait_for(lambda: load.acks.count() > at + min_acks, "records are acknowledged after the heal")
        finally:
            unreported = load.stop()
        if unreported:
            problems.append(f"{unreported} records never had a delivery report")
        problems += check_acknowledged(load.acks, read_partitions(cluster.bootstrap, 1))
        try:
            wait_for(lambda: not replicas_identical(cluster, 1), "the replicas' logs are identical",
                     timeout_s=60, interval_s=0.2)
        except AssertionError:
            problems.append(replicas_identical(cluster, 1))
        return Outcome(seed, ((0, 1),), load.acks.count(), tuple(load.acks.errors[:20]), tuple(problems))
    finally:
        for broker in brokers.values():
            broker.stop()
        kafka_proxy.close()
        zk_proxy.close()


@dataclass(frozen=True)
class Outcome:
    seed: int
    killed: tuple[tuple[int, int], ...]  # (partition or -1, broker) per broker stopped
    acknowledged: int
    delivery_errors: tuple[str, ...]
    problems: tuple[str, ...]
    longest_ack_gap_s: float = 0.0  # rolling-restart: from the first stop to the last full ISR


def run(cluster: FaultCluster, partitions: int, kills: int, seed: int, min_acks: int, max_acks: int,
        log: Callable[[str], None] = print, fault: str = "leader-kill",
        zookeeper: zk_cluster.ZooKeeper | None = None, handover: bool = False) -> Outcome:
    """Create the topic, produce under the ``fault`` (``leader-kill``: ``kills`` leader kills;
    ``zookeeper-restart``; ``rolling-restart``), and check what is left. ``handover``
    (rolling-restart): also check that each broker led nothing when its process exited."""
    rng = random.Random(seed)
    found: list[str] = []
    create_topic(cluster.bootstrap, partitions)
    load = LoadProducer(cluster.bootstrap, partitions).start()
    try:
        if fault == "leader-kill":
            killed = kill_leaders(cluster, load, kills, rng, min_acks, max_acks, log)
        elif fault == "zookeeper-restart":
            assert zookeeper is not None
            killed = restart_zookeeper(cluster, zookeeper, load, rng, min_acks, max_acks, log)
        else:
            killed = rolling_restart(cluster, load, rng, min_acks, max_acks, log, found if handover else None)
        at = load.acks.count()
        wait_for(lambda: load.acks.count() >= at + min_acks, "more records are acknowledged after the last fault")
    finally:
        unreported = load.stop()
    problems = found + ([f"{unreported} records never had a delivery report"] if unreported else [])
    wait_for(lambda: cluster.isr_full(partitions), "the cluster settles (every ISR full)")
    problems += check_acknowledged(load.acks, read_partitions(cluster.bootstrap, partitions))
    try:
        wait_for(lambda: not replicas_identical(cluster, partitions), "the replicas' logs are identical",
                 timeout_s=60, interval_s=0.2)
    except AssertionError:
        problems.append(replicas_identical(cluster, partitions))
    return Outcome(seed, tuple(killed), load.acks.count(), tuple(load.acks.errors[:20]), tuple(problems),
                   load.acks.longest_gap_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", choices=["leader-kill", "zookeeper-restart", "rolling-restart", "cut-off"],
                        default="leader-kill")
    parser.add_argument("--kills", type=int, default=10, help="leader kills (--fault leader-kill)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--min-acks", type=int, default=500, help="fewest acknowledged records between kills")
    parser.add_argument("--max-acks", type=int, default=5000, help="most acknowledged records between kills")
    parser.add_argument("--session-timeout-ms", type=int, default=2000,
                        help="the brokers' zookeeper.session.timeout.ms (how soon a kill is noticed)")
    parser.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                        help="a broker setting for every broker, e.g. controlled.shutdown.enable=false (repeatable)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"seed {seed}", flush=True)
    from kazoo.client import KazooClient

    base = Path(tempfile.mkdtemp(prefix="pulllog-faults-"))
    zk = zk_cluster.ZooKeeper(base / "zookeeper").start()
    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    brokers: list[zk_cluster.BrokerProcess] = []
    try:
        if args.fault == "cut-off":
            outcome = cut_off_leader(zk, "/faults", base, client, seed, args.min_acks, args.max_acks,
                                     args.session_timeout_ms, lambda line: print(line, flush=True))
            for problem in outcome.problems:
                print("PROBLEM:", problem)
            print("OK" if not outcome.problems else f"FAILED (seed {seed})")
            sys.exit(1 if outcome.problems else 0)
        brokers = zk_cluster.start_brokers(zk.connect + "/faults", base, 3,
                                           (f"zookeeper.session.timeout.ms={args.session_timeout_ms}",
                                            *args.override))
        cluster = FaultCluster({b.broker_id: b for b in brokers}, client, "/faults")
        started = time.monotonic()
        outcome = run(cluster, args.partitions, args.kills, seed, args.min_acks, args.max_acks,
                      lambda line: print(line, flush=True), args.fault, zk,
                      handover="controlled.shutdown.enable=false" not in args.override)
        print(f"{args.fault}: {outcome.acknowledged} records acknowledged, {len(outcome.killed)} brokers stopped, "
              f"{len(outcome.delivery_errors)} delivery errors {list(outcome.delivery_errors)}, "
              f"{time.monotonic() - started:.0f} s")
        if args.fault == "rolling-restart":
            print(f"longest time without an acknowledgement during the restarts: "
                  f"{outcome.longest_ack_gap_s * 1000:.0f} ms")
        for problem in outcome.problems:
            print("PROBLEM:", problem)
        print("OK" if not outcome.problems else f"FAILED (seed {seed})")
        sys.exit(1 if outcome.problems else 0)
    finally:
        for broker in brokers:
            broker.stop()
        client.stop()
        client.close()
        zk.stop()


if __name__ == "__main__":
    main()
