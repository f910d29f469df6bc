#!/usr/bin/env python3
"""What a transaction costs a producer: a transactional producer committing every 100 ms
beside the same idempotent producer without transactions.

For each broker (pulllog, then Apache Kafka 4.1.1 from its jars, each started from scratch)
and each client (librdkafka through confluent-kafka, and pulllog's asyncio Producer), the
producer sends 1 KiB records to a one-partition topic as fast as it can for ``--seconds``:

* **idempotent**: enable.idempotence, acks=all, no transaction; the time includes the final
  flush, and every record counted is acknowledged;
* **transactional**: the same producer with a transactional.id, committing every
  ``--commit-ms`` (100) ms; the time includes the last commit, and every record counted is
  committed.

Both clients pace transactions alike, as Kafka's producer-perf-test does with
``--transaction-duration-ms``: ``--commit-ms`` of sending, then ``commit_transaction()``,
then the next transaction begins (the time the commit takes is not part of the 100 ms).

Each client first runs ``--warmup-rounds`` (1) rounds that are not recorded: on this
project's VM the first seconds of writing into a fresh broker ran up to 2.8x faster than
every later run, whichever mode had them. The two modes alternate for ``--runs`` rounds, which of them goes first alternating too
(idempotent, transactional, transactional, idempotent, ...), so a busy moment of the shared
machine, or a drift through the series, hits both alike; the table shows the median of the runs
and the transactional producer's throughput relative to the idempotent one (Kafka's KIP-98
measured about 3% less at a 100 ms commit interval).

    python scripts/bench_txn.py [--seconds 10] [--runs 3] [--brokers pulllog,kafka] [--clients librdkafka,pulllog]
    python scripts/bench_txn.py --breakdown [--seconds 3] [--runs 2] [--brokers pulllog]
    python scripts/bench_txn.py --data-parent /dev/shm ...   # the broker's data in memory (tmpfs)

Each run writes gigabytes. On a disk whose writeback cannot keep up (this project's 2-vCPU VM:
about 4 GB in, the broker's writes start to wait for it) the runs of a series slow down one
after another, whichever mode they measure; ``--data-parent /dev/shm`` compares the two modes
without that (the runs' data then take memory: keep ``--seconds`` x ``--runs`` small).

``--breakdown`` prints, per run, medians per transaction instead: how long
``commit_transaction()`` took (the application cannot send meanwhile), the backlog when it
was called (bytes appended but not acknowledged: pulllog's buffer_memory in use,
librdkafka's queued messages; for the idempotent producer, the same every ``--commit-ms``),
and when the broker's log received nothing: its topics use LogAppendTime, so each batch in
the segment files says when the broker appended it, to the millisecond; "quiet" is the time
from the last data batch before a commit marker to the first one after it; and how fast the
log grew while ``commit_transaction()`` ran beside how fast between commits (a pipeline that
stays full while the application waits grows it as fast).

Beside the throughput, each run reports the broker's and the client process's CPU per record
and how busy each was (CPU time over the run's wall time; 100%: one core throughout): the side
near 100% is the one that limits the rate; both well below it means the rate waits on round
trips or on the machine (other work on a shared one shows as both sides idle).

Prints a Markdown table with the machine and the date.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_paper  # noqa: E402
import bench_vs_kafka  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka import Producer as RdProducer  # noqa: E402

from pulllog import Admin, Producer  # noqa: E402
from pulllog.client.admin import NewTopic  # noqa: E402
from pulllog.records.batch import iter_batches  # noqa: E402

MODES = ("idempotent", "transactional")


def modes_of_run(run: int) -> tuple[str, ...]:
    """The two modes in turn, the first of a round alternating (idempotent first in even
    rounds, transactional first in odd ones): a machine whose rate drifts through a series
    (this VM's: the first run up to 4x the later ones, then slowly down) would otherwise
    always favour the mode measured first."""
    return MODES if run % 2 == 0 else MODES[::-1]


@dataclass(frozen=True)
class CommitSample:
    """What ``--breakdown`` notes at each commit (every ``--commit-ms`` for the idempotent
    producer, which does not commit: ``seconds`` 0)."""

    backlog: int  # bytes appended but not acknowledged when commit_transaction() was called
    started: float  # when it was called, seconds since the epoch (the broker's clock too)
    seconds: float  # until it returned


@dataclass(frozen=True)
class Measured:
    """Records acknowledged (idempotent) or committed (transactional) in ``seconds``."""

    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def librdkafka_rate(bootstrap: str, topic: str, mode: str, seconds: float, size: int, commit_s: float,
                    trace: list[CommitSample] | None = None) -> Measured:
    """Records per second acknowledged (idempotent) or committed (transactional); with
    ``trace``, a CommitSample per commit interval."""
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    if mode == "transactional":
        conf["transactional.id"] = f"{topic}-tx"
    producer = RdProducer(conf)
    value = b"x" * size
    counted = 0
    if mode == "transactional":
        producer.init_transactions(60)
        producer.begin_transaction()
    started = time.monotonic()
    deadline = started + seconds
    next_commit = started + commit_s
    in_txn = 0
    while True:
        now = time.monotonic()
        if mode == "transactional" and now >= next_commit:
            backlog = len(producer) * size  # records queued or in flight, not yet acknowledged
            wall = time.time()
            producer.commit_transaction(60)
            counted += in_txn
            in_txn = 0
            next_commit = time.monotonic() + commit_s
            if trace is not None:
                trace.append(CommitSample(backlog, wall, next_commit - commit_s - now))
            if now >= deadline:
                break
            producer.begin_transaction()
        elif mode == "idempotent" and now >= deadline:
            producer.flush(60)
            break
        elif mode == "idempotent" and trace is not None and now >= next_commit:
            trace.append(CommitSample(len(producer) * size, time.time(), 0.0))  # what a commit would wait for
            next_commit = now + commit_s
        try:
            producer.produce(topic, value, partition=0)
            in_txn += 1
            if mode == "idempotent":
                counted += 1
        except BufferError:
            producer.poll(0.001)
        except KafkaException:
            raise
        producer.poll(0)
    return Measured(counted, time.monotonic() - started)


async def pulllog_rate(bootstrap: str, topic: str, mode: str, seconds: float, size: int, commit_s: float,
                       trace: list[CommitSample] | None = None) -> Measured:
    transactional_id = f"{topic}-tx" if mode == "transactional" else None
    value = b"x" * size
    async with Producer(bootstrap, transactional_id=transactional_id) as producer:
        counted = in_txn = 0
        if transactional_id is not None:
            await producer.init_transactions()
            producer.begin_transaction()
        started = time.monotonic()
        deadline = started + seconds
        next_commit = started + commit_s
        send = producer.send
        while True:
            now = time.monotonic()
            if transactional_id is not None and now >= next_commit:
                backlog = unacknowledged_bytes(producer) if trace is not None else 0
                wall = time.time()
                await producer.commit_transaction()
                counted += in_txn
                in_txn = 0
                next_commit = time.monotonic() + commit_s
                if trace is not None:
                    trace.append(CommitSample(backlog, wall, next_commit - commit_s - now))
                if now >= deadline:
                    break
                producer.begin_transaction()
            elif transactional_id is None and now >= deadline:
                await producer.flush()
                break
            elif transactional_id is None and trace is not None and now >= next_commit:
                trace.append(CommitSample(unacknowledged_bytes(producer), time.time(), 0.0))  # what a commit would wait for
                next_commit = now + commit_s
            for _ in range(100):  # the clock once per 100 records
                await send(topic, value, partition=0)
            in_txn += 100
            if transactional_id is None:
                counted += 100
        return Measured(counted, time.monotonic() - started)


def unacknowledged_bytes(producer: Producer) -> int:
    """buffer_memory held: the bytes of records sent but not yet acknowledged."""
    acc = producer._acc  # private: a measurement, not an API
    return acc.pool.used if acc is not None else 0


async def _create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=1, configs=configs)])


@dataclass(frozen=True)
class Cost:
    """A process's CPU (user + system, in 10 ms ticks for the broker's, from /proc) over one
    measurement, topic creation and the producer's start included: per record, and as a
    share of the wall time (1.0: a core busy throughout). Which side is busy says which
    one limits the throughput; a transactional run's round trips at each commit leave both
    less busy."""

    us_per_record: float
    busy: float

    @classmethod
    def of(cls, cpu_s: float, wall_s: float, measured: Measured) -> Cost:
        return cls(cpu_s / max(measured.records, 1) * 1e6, cpu_s / wall_s)


def measure(bootstrap: str, client: str, mode: str, run: int, args: argparse.Namespace,
            trace: list[CommitSample] | None = None, *, delete: bool = True) -> Measured:
    """One run into its own topic, deleted afterwards unless ``delete`` is false or
    ``--keep-topics`` (see ``bench_paper.delete_topic``)."""
    topic = f"txn-bench-{client}-{mode}-{run}"
    # the breakdown reads the broker's append times from the log: LogAppendTime batches
    asyncio.run(_create(bootstrap, topic, {"message.timestamp.type": "LogAppendTime"} if trace is not None else None))
    commit_s = args.commit_ms / 1000
    if client == "librdkafka":
        measured = librdkafka_rate(bootstrap, topic, mode, args.seconds, args.record_size, commit_s, trace)
    else:
        measured = asyncio.run(pulllog_rate(bootstrap, topic, mode, args.seconds, args.record_size, commit_s, trace))
    if delete and not args.keep_topics:
        bench_paper.delete_topic(bootstrap, topic)
    return measured


@dataclass(frozen=True)
class Appended:
    """One batch in the partition's log: when the broker appended it (LogAppendTime, ms;
    a marker's own timestamp), and whether it is a transaction marker."""

    append_ms: int
    marker: bool
    size: int


def log_batches(data_dir: Path, topic: str) -> list[Appended]:
    """The batches of ``topic``'s partition 0 in its segment files (pulllog's and Kafka's
    have the same format), in offset order."""
    found = [d for d in data_dir.rglob(f"{topic}-0") if d.is_dir()]
    if not found:
        raise SystemExit(f"no log directory for {topic}-0 under {data_dir}")
    batches: list[Appended] = []
    for segment in sorted(found[0].glob("*.log")):
        buf = segment.read_bytes()
        for _pos, header in iter_batches(buf):
            batches.append(Appended(header.max_timestamp, header.is_control, header.size))
    return batches


@dataclass(frozen=True)
class Breakdown:
    """Medians per transaction (per commit interval for the idempotent producer)."""

    commit_ms: float  # commit_transaction() called until it returned: the application cannot send
    backlog_mib: float  # bytes appended but not acknowledged when commit_transaction() was called
    quiet_ms: float  # the log's last data batch before a marker until its first one after
    marker_to_data_ms: float  # the marker's append until the next transaction's first batch
    batch_interval_ms: float  # between data batches elsewhere (the pipeline's pace)
    mib_s_in_commit: float  # data the log received while commit_transaction() ran, per second
    mib_s_between: float  # ... and between commits
    transactions: int


def breakdown(trace: list[CommitSample], batches: list[Appended]) -> Breakdown:
    quiet: list[float] = []
    after_marker: list[float] = []
    for i, b in enumerate(batches):
        if b.marker and 0 < i < len(batches) - 1 and not batches[i - 1].marker and not batches[i + 1].marker:
            quiet.append(batches[i + 1].append_ms - batches[i - 1].append_ms)
            after_marker.append(batches[i + 1].append_ms - b.append_ms)
    markers = {i for i, b in enumerate(batches) if b.marker}
    intervals = [batches[i].append_ms - batches[i - 1].append_ms for i in range(2, len(batches) - 1)
                 if not markers & {i - 2, i - 1, i, i + 1}]  # data batches away from a commit
    return Breakdown(
        commit_ms=_median([c.seconds * 1000 for c in trace]),
        backlog_mib=_median([c.backlog / 2**20 for c in trace]),
        quiet_ms=_median(quiet), marker_to_data_ms=_median(after_marker),
        batch_interval_ms=_median(intervals), **_rates(trace, batches), transactions=len(quiet))


def _rates(trace: list[CommitSample], batches: list[Appended]) -> dict[str, float]:
    """MiB/s of data appended while commit_transaction() ran and between commits (the
    pipeline's pace in both: does the broker idle while the application waits?)."""
    windows = [(c.started * 1000, (c.started + c.seconds) * 1000) for c in trace if c.seconds > 0]
    data = [b for b in batches if not b.marker]
    if not windows or len(data) < 2:
        return {"mib_s_in_commit": float("nan"), "mib_s_between": float("nan")}
    span = max(data[-1].append_ms, windows[-1][1]) - min(data[0].append_ms, windows[0][0])
    inside_ms = sum(end - start for start, end in windows)
    inside = sum(b.size for b in data if any(start <= b.append_ms <= end for start, end in windows))
    outside = sum(b.size for b in data) - inside
    per_s = 1000 / 2**20
    return {"mib_s_in_commit": inside / inside_ms * per_s,
            "mib_s_between": outside / max(span - inside_ms, 1) * per_s}


def median_interval(values: Sequence[float], *, level: float = 0.95, resamples: int = 10_000,
                    seed: int = 14) -> tuple[float, float]:
    """A percentile-bootstrap interval for the median of ``values`` (the per-round ratios):
    how far the median could move with other rounds from the same machine. On this VM a
    round's ratio spreads by +-10% or more, so a target of a few percent is met only when the
    whole interval clears it. Seeded: the same rounds give the same interval."""
    if len(values) < 2:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run_breakdown(args: argparse.Namespace, starters: dict[str, Callable[[Path], bench_vs_kafka.Served]]) -> int:
    """``--breakdown``: per-transaction times and backlog, idempotent and transactional runs
    alternating, each on a LogAppendTime topic whose log then says when the broker appended."""
    machine = bench_paper.machine()
    rows = []
    for broker in args.brokers.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-txn-{broker}-", dir=args.data_parent) as tmp:
            data_dir = Path(tmp) / "data"
            served = starters[broker](data_dir)
            try:
                measure(served.bootstrap, "librdkafka", "transactional", -1, argparse.Namespace(
                    **{**vars(args), "seconds": 2.0}))  # warm-up, not recorded
                for client in args.clients.split(","):
                    for run in range(args.runs):
                        for mode in modes_of_run(run):
                            trace: list[CommitSample] = []
                            rate = measure(served.bootstrap, client, mode, run, args, trace, delete=False).rate
                            topic = f"txn-bench-{client}-{mode}-{run}"
                            found = breakdown(trace, log_batches(data_dir, topic))
                            if not args.keep_topics:
                                bench_paper.delete_topic(served.bootstrap, topic)
                            rows.append((broker, client, mode, run, rate, found))
                            print(f"{broker} {client} {mode} run {run}: {rate:,.0f} records/s {found}", file=sys.stderr)
            finally:
                served.stop()  # type: ignore[operator]
    print(f"\n{machine}; {args.record_size}-byte records, one partition, acks=all, commit every "
          f"{args.commit_ms} ms, {args.seconds:g} s per run; medians per transaction (per {args.commit_ms} ms "
          "for the idempotent producer)\n")
    print("| broker | client | mode | run | records/s | commit_transaction() ms | backlog at commit MiB "
          "| log quiet around the marker ms | marker to next batch ms | batch interval ms "
          "| log MiB/s during commits / between |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for broker, client, mode, run, rate, b in rows:
        txn = mode != "idempotent"
        quiet = f"{b.quiet_ms:.0f}" if txn else ""
        to_data = f"{b.marker_to_data_ms:.0f}" if txn else ""
        commit = f"{b.commit_ms:.1f}" if txn else ""
        during = f"{b.mib_s_in_commit:.0f} / {b.mib_s_between:.0f}" if txn else ""
        print(f"| {broker} | {client} | {mode} | {run} | {rate:,.0f} | {commit} | {b.backlog_mib:.1f} | {quiet} "
              f"| {to_data} | {b.batch_interval_ms:.0f} | {during} |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--brokers", default="pulllog,kafka")
    parser.add_argument("--clients", default="librdkafka,pulllog")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds (both modes) per client before the measured ones, not recorded")
    parser.add_argument("--data-parent", default=None, metavar="DIR",
                        help="where the broker's data directory goes (default: the system's temporary "
                             "directory); /dev/shm keeps the disk's writeback out of the comparison")
    parser.add_argument("--breakdown", action="store_true",
                        help="per transaction: time in commit_transaction(), backlog at commit, the log's "
                             "quiet time around each marker (instead of the throughput table)")
    parser.add_argument("--keep-topics", action="store_true",
                        help="keep each run's topic (default: deleted once measured, so every run starts with "
                             "the same free memory; see bench_paper.delete_topic)")
    parser.add_argument("--pin", action="store_true",
                        help="clients on CPU 0, the broker on CPU 1 (as on separate machines; default: "
                             "wherever the scheduler puts them)")
    args = parser.parse_args()
    if args.pin:
        bench_paper.pin()
    starters: dict[str, Callable[[Path], bench_vs_kafka.Served]] = {
        "pulllog": bench_vs_kafka.start_pulllog, "kafka": bench_vs_kafka.start_kafka}
    if args.breakdown:
        return run_breakdown(args, starters)
    rows = []
    machine = bench_paper.machine()  # its load average is the one at the start
    for broker in args.brokers.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-txn-{broker}-", dir=args.data_parent) as tmp:
            served = starters[broker](Path(tmp) / "data")
            try:
                measure(served.bootstrap, "librdkafka", "transactional", -1, argparse.Namespace(
                    **{**vars(args), "seconds": 2.0}))  # warm-up (a JVM compiles its hot paths), not recorded
                for client in args.clients.split(","):
                    for warm in range(args.warmup_rounds):  # not recorded (see the module docstring)
                        for mode in modes_of_run(warm):
                            rate = measure(served.bootstrap, client, mode, -10 - warm, args).rate  # its own topic
                            print(f"{broker} {client} {mode} warm-up {warm}: {rate:,.0f} records/s", file=sys.stderr)
                    rates: dict[str, list[float]] = {m: [] for m in MODES}
                    costs: dict[str, list[tuple[Cost, Cost]]] = {m: [] for m in MODES}  # (broker, client)
                    for run in range(args.runs):
                        for mode in modes_of_run(run):
                            cpu, own, wall = served.cpu_seconds(), time.process_time(), time.monotonic()
                            measured = measure(served.bootstrap, client, mode, run, args)
                            wall = time.monotonic() - wall
                            cost = (Cost.of(served.cpu_seconds() - cpu, wall, measured),
                                    Cost.of(time.process_time() - own, wall, measured))
                            rates[mode].append(measured.rate)
                            costs[mode].append(cost)
                            print(f"{broker} {client} {mode} run {run}: {measured.rate:,.0f} records/s; CPU us per "
                                  f"record (busy): broker {cost[0].us_per_record:.2f} ({cost[0].busy:.0%}), client "
                                  f"{cost[1].us_per_record:.2f} ({cost[1].busy:.0%})", file=sys.stderr)
                    idem, txn = (statistics.median(rates[m]) for m in MODES)
                    rounds = [t / i for i, t in zip(rates["idempotent"], rates["transactional"])]
                    rows.append((broker, client, idem, txn, rounds, costs))
            finally:
                served.stop()  # type: ignore[operator]
    mib = args.record_size / 2**20
    print(f"\n{machine}; {args.record_size}-byte records, one partition, acks=all, "
          f"commit every {args.commit_ms} ms, {args.seconds:g} s per measurement, median of {args.runs}\n")
    print("| broker | client | idempotent records/s (MiB/s) | transactional records/s (MiB/s) | transactional / idempotent "
          "| per round (median [95% interval]) | CPU us / record (busy), idempotent: broker, client "
          "| transactional: broker, client |")
    print("|---|---|---|---|---|---|---|---|")
    for broker, client, idem, txn, rounds, costs in rows:
        low, high = median_interval(rounds)
        cells = []
        for m in MODES:
            side = [(statistics.median(c[k].us_per_record for c in costs[m]),
                     statistics.median(c[k].busy for c in costs[m])) for k in (0, 1)]
            cells.append(", ".join(f"{us:.2f} ({busy:.0%})" for us, busy in side))
        print(f"| {broker} | {client} | {idem:,.0f} ({idem * mib:.1f}) | {txn:,.0f} ({txn * mib:.1f}) | "
              f"{txn / idem:.2f} | {', '.join(f'{r:.2f}' for r in rounds)} ({statistics.median(rounds):.2f} "
              f"[{low:.2f}-{high:.2f}]) | "
              f"{cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
