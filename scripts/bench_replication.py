#!/usr/bin/env python3
"""What replication costs, and how long a failover takes: issue 16's benchmark.

Starts a private ZooKeeper and three ``pulllog serve`` brokers on 127.0.0.1-3 (scripts/
zk_cluster.py), then with librdkafka's producer at its default batching (linger.ms 5):

* **RF=1 acks=1**: a topic of one partition with one replica (broker 1);
* **RF=3 acks=all**: a topic of one partition on brokers 1, 2, 3 (led by 1),
  min.insync.replicas=2, idempotent producer;

each ``--runs`` times, the two cases taking turns (a busy spell on a shared machine hits
both alike). Reported per case: messages/s (first produce to last acknowledgement, median
and range) and the p99 of each message's produce latency (produce() to its delivery
report), and the ratios the issue sets targets for (RF=3 throughput >= half of RF=1's, p99
within 3x).

Then ``--failovers`` times (default 10) the **failover**: a group's offset commit first makes
``__consumer_offsets`` exist (50 partitions, RF=3, as on any cluster with consumers), then
each round waits until every partition has a leader and its whole ISR, lets acks=all
idempotent librdkafka producers (linger.ms 0; one per configuration in RDKAFKA_CONFIGS: its
defaults, topic.metadata.refresh.interval.ms 1000 and 250) write steadily to the RF=3 topic,
SIGKILLs its current leader at a random moment, and restarts the killed broker afterwards.
Leadership moves to the first live ISR replica in assignment order, so the leader alternates
between brokers 1 and 2; the odd rounds kill the leader and the controller at once (the
controller is moved to the leader first where needed, by deleting ``/controller`` until the
leader wins the election, as operators of Kafka's ZooKeeper mode do), the even ones the
leader alone.

**The target** (issue 16: the partition accepting writes again in under
``zookeeper.session.timeout.ms`` + 1 s) is judged on the **write probe** (``WriteProbe``):
from the kill on it asks each surviving broker's Metadata every 20 ms, over connections
opened before the kill, and sends an acks=all Produce to the live leader one names; its
first acknowledgement is when the partition accepts writes again, measured apart from any
client's schedule. Each librdkafka producer's first acknowledgement of a write sent after
the kill is reported beside it: what that client adds (its re-query schedule).

Each failover's timeline comes from the brokers' own log lines, stamped with this process's
monotonic clock as they arrive (every process is on this machine), from librdkafka's
metadata debug log and from the probe: the first survivor to hear ZooKeeper expire the dead
broker's session, the new controller's election (when the controller died), the
controller's write of the new leadership, the new leader and the follower applying it, the
probe learning the new leader and its first ack, librdkafka learning the new leader and its
first acks. Reported: each timeline, the probe's median and max (the target), how long
after the expiry, and each librdkafka configuration's, also as time after the probe's ack.
``BENCH_DUMP=dir`` writes every failover's merged timeline there.

``--kafka-failovers N`` then runs N of the same failovers on a 3-node Apache Kafka 4.1.1
KRaft cluster (scripts/kafka_cluster.py) at Kafka's default broker.session.timeout.ms (9000),
for reference.

    python scripts/bench_replication.py [--messages 100000] [--runs 3] [--failovers 10]
                                        [--session-timeout-ms 6000] [--kafka-failovers 0]
    python scripts/bench_replication.py --runs 0 --failovers 10   # the failovers alone
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zk_cluster

VALUE = b"x" * 200


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("rf1", 1, replica_assignment=[[1]]),
        NewTopic("rf3", 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"}),
    ], operation_timeout=60)
    for future in futures.values():
        future.result()


def produce_run(bootstrap: str, topic: str, acks: str, messages: int) -> tuple[float, float]:
    """(messages/s, p99 latency in ms) of one run."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                         "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 120_000})
    latencies: list[float] = []
    failed: list[object] = []
    last = [0.0]

    def delivered(err: object, _msg: object, sent: float) -> None:
        now = time.perf_counter()
        if err is not None:
            failed.append(err)
        latencies.append(now - sent)
        last[0] = now

    producer.produce(topic, VALUE)  # the connection and metadata, outside the measurement
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(messages):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, e.g. {failed[0]}")
    latencies.sort()
    return messages / (last[0] - start), latencies[int(len(latencies) * 0.99) - 1] * 1000


@dataclass
class StampedBroker(zk_cluster.BrokerProcess):
    """A broker whose log lines are stamped with this process's monotonic clock as they
    arrive (every process is on this machine: one clock orders them all)."""

    stamped: list[tuple[float, str]] = field(default_factory=list, repr=False)

    def spawn(self) -> subprocess.Popen[str]:
        # The broker's log records go to its stdout (plain lines: not a terminal); its stderr has the ready line.
        proc = subprocess.Popen(self.command(), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._stamp, args=(proc.stdout,), daemon=True).start()
        return proc

    def _stamp(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self.stamped.append((time.monotonic(), line.rstrip("\n")))
        except (OSError, ValueError):  # closed by stop()
            pass


def start_stamped_brokers(connect: str, base: Path, count: int, overrides: tuple[str, ...]) -> list[StampedBroker]:
    brokers: list[StampedBroker] = []
    try:
        for broker_id in range(1, count + 1):
            brokers.append(StampedBroker(broker_id, base / f"broker-{broker_id}", connect,
                                         overrides=overrides).start())
    except BaseException:
        for broker in brokers:
            broker.stop()
        raise
    return brokers


@dataclass(frozen=True)
class Failover:
    """One failover's timeline, seconds after the SIGKILL (None: not seen in the logs)."""

    leader: int  # the broker killed
    was_controller: bool
    new_leader: int
    seen_gone: float | None  # the first survivor heard ZooKeeper expire the dead broker's session
    new_controller: float | None  # (the leader was the controller) a survivor won the election
    elected: float | None  # the controller wrote the partition's new leadership
    leading: float | None  # the new leader applied it
    following: float | None  # the other survivor applied it
    probe_learned: float | None  # a survivor's Metadata first named the new leader (the write probe)
    probe_acked: float | None  # the partition accepted a write again: the probe's first acks=all ack
    probe_stale: int  # the probe's Metadata answers still naming the dead leader (the gap)
    probe_no_leader: int  # the probe's Metadata answers naming no leader (expiry seen, new view not yet)
    probe_errors: dict[int, int]  # the probe's Produce answers that were not acks: error code -> count
    client_learned: dict[str, float | None]  # librdkafka configuration -> its metadata named the new leader
    acked: dict[str, float]  # librdkafka configuration -> the first ack of a write sent after the kill


def _first(lines: list[tuple[float, str]], since: float, pattern: str) -> tuple[float, re.Match[str]] | None:
    compiled = re.compile(pattern)
    for stamp, line in lines:
        if stamp >= since and (found := compiled.search(line)):
            return stamp, found
    return None


def cluster_state(admin: object) -> tuple[int, int, bool]:
    """(rf3-0's leader, the controller, whether every partition of every topic has a leader
    and its whole ISR), as Metadata answers."""
    metadata = admin.list_topics(timeout=10)  # type: ignore[attr-defined]
    settled = all(p.leader >= 0 and len(p.isrs) == len(p.replicas)
                  for topic in metadata.topics.values() for p in topic.partitions.values())
    return metadata.topics["rf3"].partitions[0].leader, metadata.controller_id, settled


def wait_settled(admin: object, timeout_s: float = 180.0) -> tuple[int, int]:
    """Wait until every partition (__consumer_offsets' too) has a leader and its whole ISR
    again; (rf3-0's leader, the controller)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            leader, controller, settled = cluster_state(admin)
            if settled and controller >= 0:
                return leader, controller
        except (KafkaException, KeyError, IndexError) as exc:  # a broker is down, a topic not yet known
            print(f"  (metadata: {exc}; asking again)", flush=True)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the partitions did not get their leaders and full ISRs back within {timeout_s:.0f} s")
        time.sleep(0.2)


# librdkafka configurations measured side by side in every failover (each its own producer,
# all writing through the same kill). librdkafka re-queries a partition whose leader's broker is
# down only from its 1 s topic scan (a fixed timer); its fast leader query
# (topic.metadata.refresh.fast.interval.ms, backing off from retry.backoff.ms to
# retry.backoff.max.ms) runs only while a partition has no leader or after a leader error, and a
# surviving broker names the dead leader until the controller moves it. A periodic
# refresh (topic.metadata.refresh.interval.ms) is a second, independent schedule on top.
RDKAFKA_CONFIGS: dict[str, dict[str, object]] = {
    "defaults": {},  # topic.metadata.refresh.interval.ms 300000: the 1 s scan alone
    "refresh 1000": {"topic.metadata.refresh.interval.ms": 1000},  # this benchmark's setting before
    "refresh 250": {"topic.metadata.refresh.interval.ms": 250},  # documented; a Metadata request every 250 ms
}


@dataclass
class _Writer:
    """One librdkafka producer writing steadily through the kill."""

    name: str
    producer: Any
    log: list[tuple[float, str]]
    acked_after: list[float] = field(default_factory=list)


def produce_through_kill(bootstrap: str, kill: Callable[[], None],
                         configs: dict[str, dict[str, object]] | None = None
                         ) -> tuple[float, dict[str, tuple[float, list[tuple[float, str]]]]]:
    """Write steadily with acks=all idempotent producers (one per entry of ``configs``,
    default RDKAFKA_CONFIGS), ``kill`` the leader at a random moment; (the kill's time,
    name -> (the first acknowledgement of a write sent after it, librdkafka's metadata log
    with its times))."""
    from confluent_kafka import Producer

    killed_at = [float("inf")]
    stop = threading.Event()
    writers: list[_Writer] = []
    for name, extra in (RDKAFKA_CONFIGS if configs is None else configs).items():
        client_log: list[tuple[float, str]] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord, client_log: list[tuple[float, str]] = client_log) -> None:
                client_log.append((time.monotonic(), record.getMessage()))

        rdkafka_log = logging.getLogger(f"bench.rdkafka.{name}.{time.monotonic()}")
        rdkafka_log.propagate = False
        rdkafka_log.addHandler(Collect())
        rdkafka_log.setLevel(logging.DEBUG)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "message.timeout.ms": 120_000, **extra,
                             "debug": os.environ.get("BENCH_RDKAFKA_DEBUG", "metadata")}, logger=rdkafka_log)
        writers.append(_Writer(name, producer, client_log))

    def write(writer: _Writer) -> None:
        def delivered(err: object, _msg: object, sent: float) -> None:
            if err is None and sent > killed_at[0]:
                writer.acked_after.append(time.monotonic())

        while not stop.is_set():
            sent = time.monotonic()
            writer.producer.produce("rf3", VALUE, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
            writer.producer.poll(0.005)

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    try:
        # Writing steadily, then the kill at a random moment: librdkafka re-queries a partition
        # whose leader is down once a second (its topic scan), and a kill in step with that
        # second would line every run up with it.
        time.sleep(1.0 + random.random())
        killed_at[0] = time.monotonic()
        kill()
        deadline = killed_at[0] + 120
        while not all(w.acked_after for w in writers) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for w in writers:
            w.producer.flush(30)
    late = [w.name for w in writers if not w.acked_after]
    if late:
        raise RuntimeError(f"no write was acknowledged within 120 s of the leader's SIGKILL ({', '.join(late)})")
    return killed_at[0], {w.name: (w.acked_after[0], w.log) for w in writers}


@dataclass(frozen=True)
class ProbeResult:
    """What the write probe saw after a kill (monotonic times; None: never)."""

    learned: float | None  # the first Metadata answer naming a live leader
    acked: float | None  # the first acks=all Produce acknowledged by that leader
    answers: int  # Metadata answers received after the kill
    stale: int  # of them, answers naming the dead broker still (the gap before the controller moves it)
    no_leader: int  # of them, answers with no leader (-1: the broker saw the expiry, not yet the new view)
    produce_errors: dict[int, int]  # error code -> count of Produce answers that were not acks


class WriteProbe:
    """The partition's own readiness, measured apart from any client's polling schedule: after
    the kill, every ``PROBE_INTERVAL_S`` it asks each surviving broker's Metadata (connections
    opened before the kill, so no connect is counted) and, as soon as one names a live leader,
    sends that leader an acks=all Produce of one record (one in flight per broker; a failed
    or refused one is sent again at the next answer). The first acknowledgement is when the
    partition accepts writes again. Runs its own event loop in a thread, on pulllog's client
    connection; nothing here retries with a backoff or waits for a timer of its own."""

    PROBE_INTERVAL_S = 0.02
    PRODUCE_TIMEOUT_MS = 10_000

    def __init__(self, survivors: dict[int, str], dead: int, topic: str = "rf3", partition: int = 0) -> None:
        import asyncio

        self._survivors, self._dead, self._topic, self._partition = survivors, dead, topic, partition
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._conns = self._call(self._connect())
        self._done: object = None

    def _call(self, coro: object, timeout: float | None = 60.0) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    async def _connect(self) -> dict[int, Any]:
        from pulllog.client.connection import KafkaConnection

        conns = {}
        for broker_id, address in self._survivors.items():
            host, port = address.rsplit(":", 1)
            conns[broker_id] = await KafkaConnection.connect(host, int(port), client_id="failover-probe")
        return conns

    def start(self, deadline_s: float = 120.0) -> None:
        """Begin probing (call right after the kill)."""
        import asyncio

        self._done = asyncio.run_coroutine_threadsafe(self._probe(deadline_s), self._loop)

    def result(self) -> ProbeResult:
        """Wait for the first acknowledgement (or the deadline), close everything."""
        try:
            return self._done.result()  # type: ignore[attr-defined]
        finally:
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _close(self) -> None:
        for conn in self._conns.values():
            await conn.close()

    async def _probe(self, deadline_s: float) -> ProbeResult:
        import asyncio

        from pulllog.records import build_batch

        learned: list[float] = []
        acked: list[float] = []
        counts = {"answers": 0, "stale": 0, "no_leader": 0}
        errors: dict[int, int] = {}
        asking: set[int] = set()  # survivors with a Metadata request in flight
        producing: set[int] = set()  # leaders with a Produce in flight
        record = build_batch([(None, b"probe")])
        metadata = {"topics": [{"name": self._topic, "topic_id": None}], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        produce = {"transactional_id": None, "acks": -1, "timeout": self.PRODUCE_TIMEOUT_MS, "topic_data": [
            {"name": self._topic, "partition_data": [{"index": self._partition, "records": record}]}]}

        async def write(leader: int) -> None:
            conn = self._conns[leader]
            try:
                answer = await conn.request("produce", conn.version("produce", 3, 9), produce)
                code = int(answer.responses[0].partition_responses[0].error_code)
            except Exception:  # noqa: BLE001 - the connection ended: counted, sent again at the next answer
                code = -1
            if code == 0:
                acked.append(time.monotonic())
            else:
                errors[code] = errors.get(code, 0) + 1
            producing.discard(leader)

        async def ask(broker_id: int) -> None:
            conn = self._conns[broker_id]
            try:
                answer = await conn.request("metadata", conn.version("metadata", 1, 12), metadata)
                leader = next(int(p.leader_id) for t in answer.topics if t.name == self._topic
                              for p in t.partitions if int(p.partition_index) == self._partition)
            except Exception:  # noqa: BLE001 - the topic not named, the connection ended: ask again
                return
            finally:
                asking.discard(broker_id)
            counts["answers"] += 1
            if leader == self._dead:
                counts["stale"] += 1
            elif leader < 0:
                counts["no_leader"] += 1
            elif leader in self._conns and not acked:
                if not learned:
                    learned.append(time.monotonic())
                if leader not in producing:
                    producing.add(leader)
                    tasks.add(asyncio.ensure_future(write(leader)))

        tasks: set[asyncio.Future[None]] = set()
        deadline = time.monotonic() + deadline_s
        while not acked and time.monotonic() < deadline:
            for broker_id in self._conns:
                if broker_id not in asking:
                    asking.add(broker_id)
                    tasks.add(asyncio.ensure_future(ask(broker_id)))
            tasks = {t for t in tasks if not t.done()}
            await asyncio.sleep(self.PROBE_INTERVAL_S)
        for task in tasks:
            task.cancel()
        return ProbeResult(learned[0] if learned else None, acked[0] if acked else None, counts["answers"],
                           counts["stale"], counts["no_leader"], errors)


def failover(cluster: list[StampedBroker], leader: int, controller: int) -> Failover:
    """SIGKILL the partition's leader under steady acks=all producers and the write probe;
    the timeline to the first write acknowledged by the new leader."""
    victim = cluster[leader - 1]
    live = [b for b in cluster if b.proc is not None and b.proc.poll() is None]
    everyone = ",".join(b.bootstrap_servers for b in live)
    survivors = [b for b in cluster if b is not victim]
    probe = WriteProbe({b.broker_id: b.bootstrap_servers for b in survivors}, leader)

    def kill() -> None:
        victim.kill()
        probe.start()

    t0, clients = produce_through_kill(everyone, kill)
    probed = probe.result()

    def first(pattern: str, among: list[StampedBroker] = survivors) -> tuple[float, re.Match[str]] | None:
        found = [f for b in among if (f := _first(b.stamped, t0, pattern)) is not None]
        return min(found, key=lambda f: f[0]) if found else None

    def after(found: tuple[float, re.Match[str]] | float | None) -> float | None:
        if isinstance(found, float):
            return found - t0
        return None if found is None else found[0] - t0

    # A line per partition written, or one per transaction of several.
    elected = first(r"controller \(epoch \d+\): (?:rf3-0 leader |\d+ partition state\(s\) written)")
    leaders = [(f[0], b.broker_id) for b in survivors if (f := _first(b.stamped, t0, r"rf3-0: leader in epoch"))]
    new_leader = min(leaders)[1] if leaders else -1
    leading = first(r"rf3-0: leader in epoch", [b for b in survivors if b.broker_id == new_leader])
    following = first(r"rf3-0: follower of", [b for b in survivors if b.broker_id != new_leader])
    learned = {name: after(_first(log, t0, rf"rf3 \[0\].*[Ll]eader[^0-9-]*{new_leader}\b"))
               for name, (_acked, log) in clients.items()}
    if os.environ.get("BENCH_DUMP"):  # every line of the failover, in one timeline, into this directory
        merged = sorted([(t, f"rdkafka {name}: {line}") for name, (_a, log) in clients.items() for t, line in log]
                        + [(t, f"broker {b.broker_id}: {line.strip()}") for b in cluster
                           for t, line in b.stamped if t > t0 - 0.5]
                        + [(t, f"probe: {what}") for t, what in ((probed.learned, "learned"), (probed.acked, "acked"))
                           if t is not None])
        dump = Path(os.environ["BENCH_DUMP"]) / f"failover-{t0:.0f}-killed-{leader}.txt"
        dump.parent.mkdir(parents=True, exist_ok=True)
        dump.write_text("".join(f"{stamp - t0:8.3f} {line}\n" for stamp, line in merged))
    return Failover(leader, leader == controller, new_leader,
                    after(first(rf"sees brokers .*gone \[[^]]*\b{leader}\b")),
                    after(first(r"is the controller \(controller epoch")) if leader == controller else None,
                    after(elected), after(leading), after(following),
                    after(probed.learned), after(probed.acked), probed.stale, probed.no_leader, probed.produce_errors,
                    learned, {name: acked - t0 for name, (acked, _log) in clients.items()})


def ensure_offsets_topic(bootstrap: str) -> None:
    """A group's offset commit, so __consumer_offsets (50 partitions, RF=3) exists as on any
    cluster with consumers: a broker's death then moves those partitions too, and the
    controller's pass and the brokers' view application have their real size."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-replication",
                         "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                consumer.commit(offsets=[TopicPartition("rf3", 0, 0)], asynchronous=False)
                return
            except Exception:  # the coordinator's partitions are still being elected: ask again
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def move_controller_to(zk_connect: str, broker_id: int, tries: int = 30) -> bool:
    """Make ``broker_id`` the controller, as Kafka's operators do in ZooKeeper mode: delete
    ``/controller`` and let the live brokers run for it again, until that broker wins (the
    winner is whoever's watch fires first). Whether it did within ``tries`` elections."""
    import json

    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    try:
        for _ in range(tries):
            deadline = time.monotonic() + 30
            while client.exists("/controller") is None:  # an election under way
                if time.monotonic() > deadline:
                    raise RuntimeError("no controller was elected within 30 s")
                time.sleep(0.05)
            try:
                data, stat = client.get("/controller")
            except NoNodeError:
                continue
            if json.loads(data)["brokerid"] == broker_id:
                return True
            try:
                client.delete("/controller", version=stat.version)
            except NoNodeError:
                pass
        return False
    finally:
        client.stop()
        client.close()


def failovers(cluster: list[StampedBroker], count: int, zk_connect: str) -> list[Failover]:
    """``count`` failovers: each kills the partition's current leader, then restarts it and
    waits for the full ISR before the next (leadership moves to the first live replica in
    assignment order, so it alternates between brokers 1 and 2). The odd kills take the
    leader and the controller at once (the first is broker 1, both from the start), the even
    ones the leader alone: the controller is moved first where needed (``move_controller_to``)."""
    from confluent_kafka.admin import AdminClient

    bootstrap = ",".join(b.bootstrap_servers for b in cluster)
    ensure_offsets_topic(bootstrap)
    out: list[Failover] = []
    for run in range(1, count + 1):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        leader, controller = wait_settled(admin)
        # Odd rounds kill the controller with the leader, even ones the leader alone.
        wanted = leader if run % 2 == 1 else next(b.broker_id for b in cluster if b.broker_id != leader
                                                   and b.broker_id != controller)
        if (controller == leader) != (run % 2 == 1):
            if not move_controller_to(zk_connect, wanted):
                print(f"  (broker {wanted} did not win the controller election)", flush=True)
            deadline = time.monotonic() + 30
            while (controller == leader) != (run % 2 == 1) and time.monotonic() < deadline:  # Metadata catching up
                time.sleep(0.1)
                leader, controller = wait_settled(admin)
        result = failover(cluster, leader, controller)
        out.append(result)
        print(f"  failover {run}: " + _timeline(result), flush=True)
        cluster[leader - 1].start()  # back, under the same id and data directory
        bootstrap = ",".join(b.bootstrap_servers for b in cluster)
    wait_settled(AdminClient({"bootstrap.servers": bootstrap}))
    return out


def kafka_failovers(count: int, base: Path) -> list[float]:
    """The same failovers on a 3-node Apache Kafka 4.1.1 KRaft cluster (scripts/kafka_cluster.py)
    at Kafka's own broker.session.timeout.ms (9000) and broker.heartbeat.interval.ms (2000):
    seconds from each leader's SIGKILL to the first acknowledged write."""
    import kafka_cluster
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = kafka_cluster.KafkaCluster(base / "kafka", overrides={
        "broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        futures = admin.create_topics([NewTopic("rf3", 1, replica_assignment=[[1, 2, 3]],
                                                config={"min.insync.replicas": "2"})], operation_timeout=60)
        for future in futures.values():
            future.result()
        ensure_offsets_topic(cluster.bootstrap_servers)
        out: list[float] = []
        for run in range(1, count + 1):
            leader, _controller = wait_settled(admin)
            t0, clients = produce_through_kill(cluster.bootstrap_servers, lambda leader=leader: cluster.kill(leader),
                                               {"defaults": {}})
            acked = clients["defaults"][0]
            out.append(acked - t0)
            print(f"  Kafka failover {run}: killed {leader}, first ack {acked - t0:.2f} s", flush=True)
            cluster.restart(leader)
        return out
    finally:
        cluster.stop()


def _at(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _timeline(f: Failover) -> str:
    errors = ", ".join(f"{n} x error {code}" for code, n in sorted(f.probe_errors.items())) or "none"
    return (f"killed {f.leader}{' (the controller)' if f.was_controller else ''}, new leader {f.new_leader}: "
            f"session expired seen {_at(f.seen_gone)}, "
            + (f"new controller {_at(f.new_controller)}, " if f.was_controller else "")
            + f"elected {_at(f.elected)}, leading {_at(f.leading)}, following {_at(f.following)}; "
              f"probe learned {_at(f.probe_learned)}, probe first ack {_at(f.probe_acked)} "
              f"({f.probe_stale} answers naming the dead leader, {f.probe_no_leader} no leader, Produce refused: "
              f"{errors}); librdkafka "
            + ", ".join(f"{name} learned {_at(f.client_learned.get(name))} first ack {acked:.2f}"
                        for name, acked in f.acked.items()) + " s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per case (0: failovers only)")
    parser.add_argument("--failovers", type=int, default=10, help="leader SIGKILLs, one after another")
    parser.add_argument("--session-timeout-ms", type=int, default=6000, help="the brokers' zookeeper.session.timeout.ms")
    parser.add_argument("--kafka-failovers", type=int, default=0,
                        help="then as many on a 3-node Apache Kafka KRaft cluster, for reference")
    args = parser.parse_args()
    missing = zk_cluster.missing_tools()
    if missing:
        sys.exit(f"bench_replication: {missing}")
    os.environ["COLUMNS"] = "160"  # the brokers' log lines unwrapped: the failover timeline reads them
    base = Path(tempfile.mkdtemp(prefix="pulllog-bench-replication-"))
    zk = zk_cluster.ZooKeeper(base / "zookeeper").start()
    brokers: list[StampedBroker] = []
    try:
        brokers = start_stamped_brokers(zk.connect + "/bench", base, 3,
                                        (f"zookeeper.session.timeout.ms={args.session_timeout_ms}",))
        bootstrap = ",".join(b.bootstrap_servers for b in brokers)
        create_topics(bootstrap)
        results: dict[str, list[tuple[float, float]]] = {"RF=1 acks=1": [], "RF=3 acks=all": []}
        for run in range(1, args.runs + 1):
            for name, topic, acks in (("RF=1 acks=1", "rf1", "1"), ("RF=3 acks=all", "rf3", "all")):
                rate, p99 = produce_run(bootstrap, topic, acks, args.messages)
                results[name].append((rate, p99))
                print(f"  run {run}: {name:14} {rate:10,.0f} msgs/s  p99 {p99:8.1f} ms", flush=True)
        timelines = failovers(brokers, args.failovers, zk.connect + "/bench")
    finally:
        for broker in brokers:
            broker.stop()
        zk.stop()
    try:
        kafka = kafka_failovers(args.kafka_failovers, base) if args.kafka_failovers else []
    finally:  # the brokers' and ZooKeeper's data: nothing in it is read after this
        shutil.rmtree(base, ignore_errors=True)
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n# Replication's cost and failover on one machine\n\n{when}, {_cpu_name()}, {os.cpu_count()} cpu(s), "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end; three "
          f"brokers and ZooKeeper on this machine; librdkafka, 200-byte values\n")
    if args.runs:
        print(f"default batching, {args.messages:,} messages per run, {args.runs} runs per case\n")
        print("| case | msgs/s (median) | range | p99 produce latency, ms (median) |")
        print("|---|---:|---:|---:|")
        medians = {}
        for name, rows in results.items():
            rates, p99s = [r for r, _ in rows], [p for _, p in rows]
            medians[name] = (statistics.median(rates), statistics.median(p99s))
            print(f"| {name} | {medians[name][0]:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | {medians[name][1]:.1f} |")
        rf1, rf3 = medians["RF=1 acks=1"], medians["RF=3 acks=all"]
        print(f"\nRF=3 acks=all / RF=1 acks=1: throughput {rf3[0] / rf1[0]:.2f}x (target >= 0.5), "
              f"p99 {rf3[1] / rf1[1]:.2f}x (target <= 3)\n")
    if timelines:
        print_failovers(timelines, args.session_timeout_ms)
    if kafka:
        print(f"\nApache Kafka 4.1.1 (KRaft, broker.session.timeout.ms 9000), the same failovers: median "
              f"{statistics.median(kafka):.2f} s, max {max(kafka):.2f} s over {len(kafka)} "
              f"({', '.join(f'{k:.2f}' for k in kafka)})")


def print_failovers(timelines: list[Failover], session_timeout_ms: int) -> None:
    target = session_timeout_ms / 1000 + 1
    names = list(timelines[0].acked)
    print(f"Failover, seconds after the leader's SIGKILL (zookeeper.session.timeout.ms {session_timeout_ms}, "
          f"ZooKeeper's tickTime {zk_cluster.TICK_MS} ms):\n")
    print("| killed -> new leader | session expiry seen | new controller | leader elected | new leader leads "
          "| follower follows | probe learns | **probe: first ack** | librdkafka learns (defaults) | "
          + " | ".join(f"librdkafka first ack ({name})" for name in names) + " |")
    print("|---|" + "---:|" * (8 + len(names)))
    for f in timelines:
        print(f"| {f.leader}{' (controller)' if f.was_controller else ''} -> {f.new_leader} | {_at(f.seen_gone)} | "
              f"{_at(f.new_controller)} | {_at(f.elected)} | {_at(f.leading)} | {_at(f.following)} | "
              f"{_at(f.probe_learned)} | **{_at(f.probe_acked)}** | {_at(f.client_learned.get(names[0]))} | "
              + " | ".join(f"{f.acked[name]:.2f}" for name in names) + " |")

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s" if values else "not seen"

    probe = [f.probe_acked for f in timelines if f.probe_acked is not None]
    ours = [f.probe_acked - f.seen_gone for f in timelines if f.seen_gone is not None and f.probe_acked is not None]
    applied = [f.probe_learned - min(t for t in (f.leading, f.following) if t is not None) for f in timelines
               if f.probe_learned is not None and (f.leading is not None or f.following is not None)]
    errors: dict[int, int] = {}
    for f in timelines:
        for code, n in f.probe_errors.items():
            errors[code] = errors.get(code, 0) + n
    met = bool(probe) and len(probe) == len(timelines) and max(probe) < target
    print(f"\nThe partition accepts writes again (the probe's first acks=all ack; target under {target:.1f} s): "
          f"{spread(probe)} over {len(timelines)} ({'met' if met else 'NOT met'} by the max); from the expiry "
          f"seen: {spread(ours)}. The probe's Metadata named the new leader {spread(applied)} after the first "
          f"survivor applied the new view; before, {sum(f.probe_stale for f in timelines)} answers named the dead "
          f"leader and {sum(f.probe_no_leader for f in timelines)} no leader; Produce answers that were not acks: "
          + (", ".join(f"{n} x error {code}" for code, n in sorted(errors.items())) or "none"))
    for name in names:
        acked = [f.acked[name] for f in timelines]
        behind = [f.acked[name] - f.probe_acked for f in timelines if f.probe_acked is not None]
        print(f"librdkafka ({name}{': ' + ', '.join(f'{k}={v}' for k, v in RDKAFKA_CONFIGS.get(name, {}).items()) if RDKAFKA_CONFIGS.get(name) else ''}): "
              f"first ack {spread(acked)}; after the probe's: {spread(behind)}")


if __name__ == "__main__":
    main()
