#!/usr/bin/env python3
"""Exactly-once under crashes: a consume-transform-produce loop SIGKILLed and restarted.

A pulllog broker runs as its own process (``pulllog serve``); the input topic gets
``--records`` records (unique values) from an idempotent producer. Then the loop
(scripts/eos_worker.py: a read_committed group consumer and a transactional producer that
writes each poll's transformed records and the consumer's offsets in one transaction) runs
as a separate process and is SIGKILLed ``--kills`` times at moments chosen by a seeded
random plan, each time restarted; in ``--broker-kills`` of those rounds the broker is
SIGKILLed first (and restarted on the same port and data directory) while the worker runs
on. A moment is a state the worker reports, never a delay: after its k-th ``committed``
(between transactions), after the k-th record ``sent`` (a transaction open, records in
flight), after ``offsets`` (the offsets added, before EndTxn) or at ``committing`` (EndTxn
on its way: the broker may die between the transaction's markers). After the last kill the
worker runs until it has consumed the whole input.

Then the output topic is read read_committed from the start, by pulllog's Consumer and by
librdkafka's, and must hold each input record's transform exactly once (compared as
multisets: duplicates and missing records are listed), and the group's committed offsets
must be the input's end offsets.

    python scripts/eos_crash.py [--seed N] [--kills 10] [--broker-kills 3] [--records 3000]
        [--client pulllog|librdkafka] [--broker pulllog|kafka] [--librdkafka-rebootstrap]
        [--max-records 10] [--keep DIR]

``--broker kafka`` runs the same against Apache Kafka (scripts/kafka_reference.py), SIGKILLed
and restarted the same way, to tell a client's behaviour from pulllog's. librdkafka's worker
runs with ``metadata.recovery.strategy=none``: with its default (re-bootstrap when every known
broker is down, as a one-broker cluster's restart makes it), librdkafka 2.16 may wait forever
in ``send_offsets_to_transaction`` after a broker restart, against Kafka as against pulllog
(librdkafka #5511); ``--librdkafka-rebootstrap`` keeps the default to reproduce that.

Exit status 0 when the output is exactly the input, 1 otherwise. Every process it starts is
stopped by its PID. tests/txn/test_exactly_once_crashes.py runs a small instance of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from eos_worker import transform

IN_TOPIC, OUT_TOPIC, GROUP, TRANSACTIONAL_ID = "eos-in", "eos-out", "eos-group", "eos-loop"
PARTITIONS = 3
# Bounds, never the expected path: a broker or worker that takes this long is stuck.
STEP_TIMEOUT_S = 120.0
# The events a kill may follow (see scripts/eos_worker.py) and how many of them to wait for.
WORKER_MOMENTS = ("committed", "sent", "offsets", "committing")
BROKER_MOMENTS = ("sent", "offsets", "committing")


@dataclass(frozen=True)
class Moment:
    """Kill after the ``count``-th ``event`` line of the current worker process."""

    event: str
    count: int

    def __str__(self) -> str:
        return f"after {self.event} #{self.count}"


@dataclass(frozen=True)
class Round:
    """One worker lifetime: optionally the broker killed first, then the worker."""

    worker: Moment
    broker: Moment | None


@dataclass
class Outcome:
    """What happened, and what the committed output holds."""

    seed: int
    log: list[str] = field(default_factory=list)
    duplicates: dict[bytes, int] = field(default_factory=dict)
    missing: list[bytes] = field(default_factory=list)
    unexpected: list[bytes] = field(default_factory=list)
    offsets_wrong: dict[int, tuple[int | None, int]] = field(default_factory=dict)
    readers_disagree: str = ""
    worker_errors: list[str] = field(default_factory=list)
    aborts: int = 0

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.offsets_wrong
                    or self.readers_disagree)

    def say(self, line: str) -> None:
        self.log.append(line)
        print(line, flush=True)

    def summary(self) -> str:
        if self.ok:
            return f"seed {self.seed}: the committed output holds each input record exactly once"
        parts = [f"seed {self.seed}: NOT exactly once"]
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} duplicated: "
                         + ", ".join(f"{v.decode()} x{n}" for v, n in sorted(self.duplicates.items())[:20]))
        if self.missing:
            parts.append(f"{len(self.missing)} missing: " + ", ".join(v.decode() for v in sorted(self.missing)[:20]))
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected: "
                         + ", ".join(repr(v) for v in sorted(self.unexpected)[:20]))
        if self.offsets_wrong:
            parts.append("committed offsets (committed, end): " + str(self.offsets_wrong))
        if self.readers_disagree:
            parts.append(self.readers_disagree)
        return "; ".join(parts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class BrokerProcess:
    """``pulllog serve`` on a fixed port and data directory, SIGKILLed and restarted by PID."""

    def __init__(self, data_dir: Path, port: int, log_path: Path) -> None:
        self.data_dir, self.port, self.log_path = data_dir, port, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir", str(self.data_dir),
                 "--listen", self.bootstrap, "--log-level", "warning",
                 "--override", f"num.partitions={PARTITIONS}", "--override", "group.initial.rebalance.delay.ms=0"],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not _listening(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not listen on {self.port}; see {self.log_path}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


class KafkaBrokerProcess:
    """Apache Kafka (scripts/kafka_reference.py) in the broker's place: the same run against
    the reference broker, to tell a client's behaviour from pulllog's. SIGKILLed and restarted
    on its ports and data directory like :class:`BrokerProcess`."""

    def __init__(self, data_dir: Path) -> None:
        import kafka_reference

        self.ref = kafka_reference.KafkaReference(
            data_dir, free_port(), free_port(),
            overrides={"num.partitions": str(PARTITIONS), "transaction.state.log.num.partitions": "5"})

    @property
    def bootstrap(self) -> str:
        return self.ref.bootstrap_servers

    def start(self) -> None:
        self.ref.start(timeout_s=STEP_TIMEOUT_S)

    def kill(self) -> None:
        self.ref.kill()


class WorkerProcess:
    """scripts/eos_worker.py with its stdout read line by line on a thread."""

    def __init__(self, bootstrap: str, client: str, max_records: int, log_path: Path,
                 rebootstrap: bool = False) -> None:
        with open(log_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / "eos_worker.py"), bootstrap, IN_TOPIC, OUT_TOPIC, GROUP,
                 TRANSACTIONAL_ID, "--client", client, "--partitions", str(PARTITIONS),
                 "--max-records", str(max_records), *(["--rebootstrap"] if rebootstrap else [])],
                stdout=subprocess.PIPE, stderr=err, text=True)
        self.client, self.rebootstrap = client, rebootstrap
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.counts: Counter[str] = Counter()
        self.last_error = ""
        self.last_line = ""
        self.events_path = log_path.with_name("events.log")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.events_path, "a") as events:
            for line in self.proc.stdout:
                events.write(f"{self.proc.pid} {line}")
                events.flush()
                self.lines.put(line.strip())
        self.lines.put(None)

    def events(self) -> Iterator[str]:
        """The worker's events as they come; ends when it exits."""
        while True:
            try:
                line = self.lines.get(timeout=STEP_TIMEOUT_S)
            except queue.Empty:
                known = ""
                if self.client == "librdkafka" and self.rebootstrap and self.last_line.startswith("sent "):
                    known = ("; in send_offsets_to_transaction after a broker restart this is librdkafka's "
                             "hang with a decommissioned group coordinator (librdkafka #5511), which "
                             "metadata.recovery.strategy=none avoids (the default here without --librdkafka-rebootstrap)")
                raise RuntimeError(f"worker {self.proc.pid} reported nothing for {STEP_TIMEOUT_S:.0f} s after "
                                   f"{self.last_line!r}: stuck (its stderr is in worker.log){known}") from None
            if line is None:
                self.proc.wait()
                return
            event = line.split(" ", 1)[0]
            self.counts[event] += 1
            self.last_line = line
            if event == "error":
                self.last_error = line
            yield event

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def plan(rng: random.Random, kills: int, broker_kills: int, max_records: int) -> list[Round]:
    """The seeded kill plan: ``kills`` worker kills, ``broker_kills`` of them after a broker kill."""
    with_broker = set(rng.sample(range(kills), min(broker_kills, kills)))
    rounds = []
    for i in range(kills):
        event = rng.choice(WORKER_MOMENTS)
        count = rng.randint(1, max_records * 2) if event == "sent" else rng.randint(1, 3)
        broker = None
        if i in with_broker:
            b_event = rng.choice(BROKER_MOMENTS)
            broker = Moment(b_event, rng.randint(1, max_records) if b_event == "sent" else rng.randint(1, 2))
        rounds.append(Round(Moment(event, count), broker))
    return rounds


async def produce_input(bootstrap: str, records: int) -> list[bytes]:
    """Create the topics and write the input (values unique); return the values."""
    from pulllog import Admin
    from pulllog.client.admin import NewTopic

    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(IN_TOPIC, PARTITIONS), NewTopic(OUT_TOPIC, PARTITIONS)])
    values = [f"in-{i:06d}".encode() for i in range(records)]
    producer = await _started_idempotent_producer(bootstrap)
    try:
        futures = [await producer.send(IN_TOPIC, v, key=v) for v in values]
        await producer.flush()
        for f in futures:
            await f
    finally:
        await producer.close()
    return values


async def _started_idempotent_producer(bootstrap: str) -> Any:
    """An idempotent Producer, started. A Kafka broker that has just started answers
    InitProducerId COORDINATOR_LOAD_IN_PROGRESS until its controller has handed it a block
    of producer ids; pulllog's Producer does not retry that at start, so this does."""
    from kio.schema.errors import ErrorCode

    from pulllog import KafkaError, Producer

    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        producer = Producer(bootstrap, enable_idempotence=True, linger_ms=5)
        try:
            await producer.start()
            return producer
        except KafkaError as exc:
            await producer.close()
            if exc.code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def read_committed_pulllog(bootstrap: str) -> tuple[list[bytes], dict[int, int | None], dict[int, int]]:
    """The output topic read read_committed from the start by pulllog's Consumer, the group's
    committed input offsets and the input's end offsets."""
    from pulllog import Consumer, TopicPartition

    out = [TopicPartition(OUT_TOPIC, p) for p in range(PARTITIONS)]
    values: list[bytes] = []
    async with Consumer(bootstrap, isolation_level="read_committed", auto_offset_reset="earliest") as reader:
        reader.assign(out)
        ends = await reader.end_offsets(out)
        while any([await reader.position(tp) < ends[tp] for tp in out]):
            batch = await reader.getmany(timeout_ms=1000)
            values.extend(r.value for recs in batch.values() for r in recs if r.value is not None)
    inputs = [TopicPartition(IN_TOPIC, p) for p in range(PARTITIONS)]
    async with Consumer(bootstrap, group_id=GROUP, enable_auto_commit=False) as group:
        committed = {tp.partition: await group.committed(tp) for tp in inputs}
        in_ends = {tp.partition: end for tp, end in (await group.end_offsets(inputs)).items()}
    return values, committed, in_ends


def read_committed_librdkafka(bootstrap: str) -> list[bytes]:
    """The output topic read read_committed from the start by librdkafka's consumer."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(OUT_TOPIC, p, 0) for p in range(PARTITIONS)])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError("librdkafka's consumer did not reach the end of the output")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition, value = msg.error(), msg.partition(), msg.value()
            assert partition is not None
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"librdkafka's consumer: {error}")
                at_end.add(partition)
                continue
            assert value is not None
            values.append(value)
            at_end.discard(partition)
        return values
    finally:
        consumer.close()


def compare(outcome: Outcome, inputs: list[bytes], output: list[bytes]) -> None:
    expected, got = Counter(transform(v) for v in inputs), Counter(output)
    outcome.duplicates = {v: n for v, n in got.items() if n > 1 and v in expected}
    outcome.missing = sorted(expected - got)
    outcome.unexpected = sorted(v for v in got if v not in expected)


def run_worker_round(broker: BrokerProcess | KafkaBrokerProcess, worker: WorkerProcess, rnd: Round | None, outcome: Outcome) -> bool:
    """Let the worker run until the round's moment (then kill it) or until it ends by itself;
    True once it reported ``done``."""
    pending_broker = rnd.broker if rnd else None
    for event in worker.events():
        if event == "aborting":
            outcome.aborts += 1
            outcome.say(f"  the worker aborts a transaction: {worker.last_line[len('aborting '):]}")
        if pending_broker and event == pending_broker.event and worker.counts[event] >= pending_broker.count:
            broker.kill()
            outcome.say(f"  broker SIGKILLed {pending_broker}; restarting it")
            broker.start()
            pending_broker = None
            worker.counts.clear()  # the worker's moment counts from the broker's restart
            continue
        if rnd and pending_broker is None and event == rnd.worker.event and worker.counts[event] >= rnd.worker.count:
            worker.kill()
            outcome.say(f"  worker SIGKILLed {rnd.worker} ({worker.counts['committed']} commits since start)")
            return False
        if event == "done":
            worker.proc.wait()
            return True
    if worker.last_error:
        outcome.worker_errors.append(worker.last_error)
        outcome.say(f"  the worker stopped by itself: {worker.last_error}")
    else:
        outcome.say(f"  the worker exited with {worker.proc.returncode}")
    return False


def run(seed: int, kills: int, broker_kills: int, records: int, client: str, max_records: int,
        work_dir: Path, broker_kind: str = "pulllog", rebootstrap: bool = False) -> Outcome:
    outcome = Outcome(seed)
    rng = random.Random(seed)
    rounds = plan(rng, kills, broker_kills, max_records)
    outcome.say(f"seed {seed}: {records} input records, {kills} worker kills, {broker_kills} broker kills, "
                f"client {client}, at most {max_records} records per transaction, broker {broker_kind}")
    broker = (KafkaBrokerProcess(work_dir / "kafka") if broker_kind == "kafka"
              else BrokerProcess(work_dir / "data", free_port(), work_dir / "broker.log"))
    worker: WorkerProcess | None = None
    try:
        broker.start()
        inputs = asyncio.run(produce_input(broker.bootstrap, records))
        worker_log = work_dir / "worker.log"
        for i, rnd in enumerate(rounds, 1):
            outcome.say(f"round {i}: kill the worker {rnd.worker}"
                        + (f", the broker first {rnd.broker}" if rnd.broker else ""))
            worker = WorkerProcess(broker.bootstrap, client, max_records, worker_log, rebootstrap)
            if run_worker_round(broker, worker, rnd, outcome):
                outcome.say("  the worker consumed the whole input before its moment")
                break
        else:
            outcome.say("final run: until the whole input is consumed")
            for _ in range(5):
                worker = WorkerProcess(broker.bootstrap, client, max_records, worker_log, rebootstrap)
                if run_worker_round(broker, worker, None, outcome):
                    break
            else:
                raise RuntimeError(f"the worker never finished the input; see {worker_log}")
        output, committed, ends = asyncio.run(read_committed_pulllog(broker.bootstrap))
        other = read_committed_librdkafka(broker.bootstrap)
        if Counter(other) != Counter(output):
            outcome.readers_disagree = (f"librdkafka's read_committed consumer read {len(other)} records, "
                                        f"pulllog's {len(output)} (different multisets)")
        compare(outcome, inputs, output)
        outcome.offsets_wrong = {p: (committed[p], ends[p]) for p in ends if committed[p] != ends[p]}
        outcome.say(f"output: {len(output)} committed records for {len(inputs)} inputs")
        outcome.say(outcome.summary())
        return outcome
    finally:
        if worker is not None:
            worker.kill()
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="the kill plan's seed (default: random, printed)")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--broker-kills", type=int, default=3)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--client", choices=["pulllog", "librdkafka"], default="pulllog")
    parser.add_argument("--broker", choices=["pulllog", "kafka"], default="pulllog",
                        help="the broker to run against: pulllog, or Apache Kafka as the reference")
    parser.add_argument("--librdkafka-rebootstrap", action="store_true",
                        help="run librdkafka's worker with its default metadata.recovery.strategy=rebootstrap, "
                             "to reproduce its send_offsets_to_transaction hang after a broker restart (#5511)")
    parser.add_argument("--max-records", type=int, default=10, help="records per transaction, at most")
    parser.add_argument("--keep", type=Path, default=None, help="keep the data and logs in this directory")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        outcome = run(seed, args.kills, args.broker_kills, args.records, args.client, args.max_records, args.keep,
                      args.broker, args.librdkafka_rebootstrap)
    else:
        with tempfile.TemporaryDirectory(prefix="eos-crash-") as tmp:
            outcome = run(seed, args.kills, args.broker_kills, args.records, args.client, args.max_records,
                          Path(tmp), args.broker, args.librdkafka_rebootstrap)
    sys.exit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
