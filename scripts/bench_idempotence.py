"""What the idempotent-producer checks cost on the append path: CPU per ``Log.append``.

Appends N one-record batches (200-byte values, built and CRC'd before the clock starts) to a
fresh partition log, once with batches without a producer id (producerId = -1) and once
as an idempotent producer's batches (one producer id, consecutive sequences). Reports
process CPU microseconds per append, median of ``--runs`` (the cases take turns).

A/B against the code without the checks: run it with ``PYTHONPATH=/work/main/src`` and with
the branch's ``src`` (interleaved, as the machine is shared); the difference of the
``idempotent`` rows is the checks' cost, the ``no producer id`` rows must not move.

    PYTHONPATH=src python scripts/bench_idempotence.py --messages 100000 --runs 5

``--broker``: the same question end to end. A ``pulllog serve`` broker in its own process
(scripts/bench_paper.py's), librdkafka producing N messages with ``batch.num.messages=1``
(one batch per Produce request), acks=all, with and without ``enable.idempotence``; reported
is the broker process's CPU (user + system from /proc) per request.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pulllog
from pulllog.log import Log, LogConfig
from pulllog.records import build_batch

VALUE = b"x" * 200


def batches(n: int, idempotent: bool) -> list[bytes]:
    if idempotent:
        return [build_batch([(None, VALUE, 1_700_000_000_000)], producer_id=1234, producer_epoch=0, base_sequence=i)
                for i in range(n)]
    return [build_batch([(None, VALUE, 1_700_000_000_000)])] * n


def run(data: list[bytes], directory: Path) -> float:
    log = Log.open(directory, LogConfig())
    append = log.append
    start = time.process_time()
    for batch in data:
        append(batch)
    elapsed = time.process_time() - start
    log.close()
    return elapsed / len(data) * 1e6


def state_work(n: int) -> float:
    """The checks alone, without I/O: check_append + record_append per batch (us)."""
    from pulllog.log.producer_state import ProducerStateManager
    from pulllog.records.batch import read_header

    headers = [[(0, read_header(b))] for b in batches(n, True)]
    with tempfile.TemporaryDirectory(prefix="bench-idem-") as tmp:
        state = ProducerStateManager(Path(tmp))
        check, record = state.check_append, state.record_append
        start = time.process_time()
        for one in headers:
            check(one)
            record(one)
        return (time.process_time() - start) / n * 1e6


def plain_work(n: int) -> float:
    """What Log.append adds for a batch without a producer id: the loop that looks for one (us)."""
    from pulllog.records.batch import read_header

    one = [(0, read_header(batches(1, False)[0]))]
    start = time.process_time()
    for _ in range(n):
        idempotent = False
        for _pos, header in one:
            if header.producer_id >= 0:
                idempotent = True
                break
        if idempotent:
            pass
    return (time.process_time() - start) / n * 1e6


def broker_cpu_per_request(n: int, runs: int) -> dict[str, list[float]]:
    import sys

    import confluent_kafka

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_paper import BrokerProcess

    results: dict[str, list[float]] = {"no producer id": [], "idempotent": []}
    value = b"x" * 200
    with tempfile.TemporaryDirectory(prefix="bench-idem-broker-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", "asyncio")
        try:
            for r in range(runs):
                for name in results:
                    topic = f"{name.replace(' ', '-')}-{r}"
                    producer = confluent_kafka.Producer({
                        "bootstrap.servers": broker.bootstrap, "acks": "all", "batch.num.messages": 1,
                        "linger.ms": 0, "queue.buffering.max.messages": 1_000_000,
                        "enable.idempotence": name == "idempotent"})
                    producer.list_topics(topic, timeout=10)
                    producer.produce(topic, value, partition=0)
                    assert producer.flush(30) == 0
                    cpu = broker.cpu_seconds()
                    for _ in range(n):
                        while True:
                            try:
                                producer.produce(topic, value, partition=0)
                                break
                            except BufferError:
                                producer.poll(0.001)
                    assert producer.flush(120) == 0
                    results[name].append((broker.cpu_seconds() - cpu) / n * 1e6)
        finally:
            broker.proc.kill()
            broker.proc.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--broker", action="store_true", help="broker CPU per request with librdkafka instead")
    args = parser.parse_args()
    if args.broker:
        print(f"pulllog from {Path(pulllog.__file__).parent}, librdkafka batch.num.messages=1, "
              f"{args.messages} requests x {args.runs} runs")
        print("| case | broker CPU us per request (median) | min | max |")
        print("|---|---|---|---|")
        for name, values in broker_cpu_per_request(args.messages, args.runs).items():
            print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")
        return
    cases = {"no producer id": batches(args.messages, False), "idempotent": batches(args.messages, True)}
    results: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="bench-idem-") as tmp:
        for r in range(args.runs):
            for name, data in cases.items():
                results[name].append(run(data, Path(tmp) / f"{name.replace(' ', '-')}-{r}-0"))
    print(f"pulllog from {Path(pulllog.__file__).parent}, {args.messages} appends x {args.runs} runs")
    print("| case | CPU us per append (median) | min | max |")
    print("|---|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    try:
        work = [state_work(args.messages) for _ in range(args.runs)]
    except ImportError:
        return  # code without producer state
    plain = [plain_work(args.messages * 10) for _ in range(args.runs)]
    print(f"| added work alone (no producer id) | {statistics.median(plain):.3f} | {min(plain):.3f} | "
          f"{max(plain):.3f} |")
    print(f"| producer-state checks alone (idempotent) | {statistics.median(work):.2f} | {min(work):.2f} | "
          f"{max(work):.2f} |")


if __name__ == "__main__":
    main()
