#!/usr/bin/env python3
"""Broker CPU per Produce request at batch size 1 (or ``--records``), without a real client in the way.

A blocking-socket client sends the same one-record Produce request (a 200-byte value, acks=1)
``--requests`` times to a broker in its own process, either one at a time (send, wait for the
answer: what pulllog's and aiokafka's producers do at batch 1) or ``--window`` requests in
flight (librdkafka pipelines). The client does next to no work, so the broker's user+system
CPU (from /proc) divided by the requests is the broker's per-request cost, and a run takes
seconds. Run it under two PYTHONPATHs to A/B a change (the broker inherits it)::

    PYTHONPATH=src python scripts/bench_broker_request.py --window 1 --window 16 --runs 3
    PYTHONPATH=src python scripts/bench_broker_request.py --strace   # syscalls per request
    PYTHONPATH=src python scripts/bench_broker_request.py --records 50 --window 5 --callgrind

Reported per case: broker CPU µs per request (median and range over the runs) and, with
``--strace``, the broker's syscalls per request by name (strace -c -f attached for one run).

``--callgrind`` counts the broker's CPU instructions per request instead, which other work
on a shared machine does not change: the broker runs under valgrind's callgrind with
instrumentation off until it is warm, then ``callgrind_control`` switches it on for a run
of ``--requests // 5`` requests and again for a run of ``--requests``; the difference of the
two counts divided by the difference of the requests is the cost of one request, with the
fixed cost of switching and dumping taken out. The second run's profile is kept (``--keep``
names a directory; ``callgrind_annotate`` reads it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from pulllog.broker import Broker
    async def main():
        async with Broker(data_dir=sys.argv[1], port=0) as broker:
            if broker.topics.find("bench") is None:  # Produce does not create topics (only Metadata)
                broker.topics.create("bench", 1)
            print("ready", broker.port, flush=True)
            await asyncio.Event().wait()  # until the benchmark terminates this process
    loop_factory = None
    if sys.argv[2] == "uvloop":
        import uvloop
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    """
)


def produce_request(version: int, correlation_id: int, topic: str, records: bytes) -> bytes:
    from pulllog.net.produce import encode_produce_request

    class Partition:
        index = 0

    Partition.records = records  # type: ignore[attr-defined]

    class TopicData:
        name = topic
        partition_data = [Partition]

    class Body:
        transactional_id = None
        acks = 1
        topic_data = [TopicData]

        class timeout:  # noqa: N801
            @staticmethod
            def total_seconds() -> float:
                return 30.0

    return encode_produce_request(Body, version, correlation_id, "bench-broker")


def recv_exactly(sock: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        r = sock.recv_into(view[got:])
        if not r:
            raise SystemExit("the broker closed the connection")
        got += r


def partition_error_code(answer: bytearray, version: int) -> int:
    """The error code of the one partition of a Produce answer to ``produce_request``."""
    if version >= 9:  # correlation id, tags, topics (1), name, partitions (1), index, error code
        name_length = answer[6] - 1
        return struct.unpack_from(">h", answer, 4 + 1 + 1 + 1 + name_length + 1 + 4)[0]
    (name_length,) = struct.unpack_from(">h", answer, 8)
    return struct.unpack_from(">h", answer, 4 + 4 + 2 + name_length + 4 + 4)[0]


def run_case(port: int, request: bytes, requests: int, window: int, think_us: float = 0, sleep_us: float = 0,
             version: int = 9) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = bytearray(4)
        body = bytearray(1 << 16)
        in_flight = 0
        sent = 0
        done = 0
        while done < requests:
            while in_flight < window and sent < requests:
                if think_us:  # a client that works between requests (pulllog's Producer: ~150 us)
                    until = time.perf_counter() + think_us / 1e6
                    while time.perf_counter() < until:
                        pass
                if sleep_us:
                    time.sleep(sleep_us / 1e6)
                sock.sendall(request)
                sent += 1
                in_flight += 1
            recv_exactly(sock, 4, head)
            (size,) = struct.unpack(">i", head)
            recv_exactly(sock, size, body)
            if done == 0 and (code := partition_error_code(body, version)):
                raise SystemExit(f"the broker answered error code {code}: the requests are not appended")
            in_flight -= 1
            done += 1


def minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of the process's threads so far."""
    voluntary = involuntary = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    voluntary += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    involuntary += int(line.split()[1])
    return voluntary, involuntary


def pulllog_client_case(port: int, requests: int, window: int, records: int = 1) -> None:
    """pulllog's own Producer, one batch per request (up to 5 requests in flight): what
    bench_paper runs. ``records`` 1: ``send()`` with ``batch_size=1`` (batch 1); more:
    ``send_batch()`` of that many values with ``batch_size=1`` (batch 50)."""
    import asyncio

    from pulllog.client.producer import Producer

    async def produce() -> None:
        value = os.urandom(200)
        async with Producer(f"127.0.0.1:{port}", acks=1, batch_size=1) as producer:
            await producer.partitions_for("bench")
            if records == 1:
                for _ in range(requests):
                    await producer.send("bench", value, partition=0)
            else:
                values = [value] * records
                for _ in range(requests):
                    await producer.send_batch("bench", values, partition=0)
            await producer.flush()

    asyncio.run(produce())


def _callgrind_instructions(pid: int, out: Path, run: Callable[[], None]) -> int:
    """Instructions the broker executes during ``run()``: counted from zero, dumped after."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    run()
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    before = set(out.parent.glob(out.name + "*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    dumps = sorted(set(out.parent.glob(out.name + "*")) - before, key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise SystemExit("callgrind wrote no profile")
    return _self_cost_total(dumps[-1].read_text(errors="replace"))


def _self_cost_total(profile: str) -> int:
    """The sum of a callgrind profile's self costs. Its ``summary`` line says 0 when
    instrumentation was switched on by callgrind_control, so the cost lines are added up:
    every ``position cost`` line except the inclusive cost that follows a ``calls=`` line."""
    total = 0
    after_calls = False
    for line in profile.splitlines():
        if line.startswith("calls="):
            after_calls = True
        elif line[:1].isdigit() or line[:1] in ("+", "-", "*"):
            parts = line.split()
            if not after_calls and len(parts) >= 2:
                total += int(parts[1])
            after_calls = False
        else:
            after_calls = False
    return total


def _ready_port(proc: subprocess.Popen[str], failed: str) -> int:
    """The port of the broker ``proc`` started (its first line: "ready PORT"); else exit with ``failed``."""
    assert proc.stdout is not None
    ready = proc.stdout.readline().split()
    if len(ready) != 2 or ready[0] != "ready":
        raise SystemExit(failed)
    return int(ready[1])


def callgrind_case(args: argparse.Namespace, request: bytes, window: int) -> None:
    """The broker's instructions per request (module docstring)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        out_dir = Path(args.keep or tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / "callgrind.broker"
        for old in out_dir.glob("callgrind.broker*"):  # a kept directory's earlier profiles
            old.unlink()
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                                 sys.executable, "-c", BROKER, tmp, args.broker_loop],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            port = _ready_port(proc, "the broker did not start under valgrind")
            run_case(port, request, 2000, window, version=args.version)  # warms up
            small = max(1, args.requests // 5)
            counts = {}
            for n in (small, args.requests):
                counts[n] = _callgrind_instructions(proc.pid, out, lambda n=n: run_case(port, request, n, window, version=args.version))
        finally:
            proc.terminate()
            proc.wait()
    per_request = (counts[args.requests] - counts[small]) / (args.requests - small)
    import pulllog
    print(f"pulllog from {Path(pulllog.__file__).parent}; Produce v{args.version}, {args.records} record(s) "
          f"per request, window {window}, {args.broker_loop}: broker {per_request:,.0f} instructions per request "
          f"(callgrind; {small} and {args.requests} requests: {counts[small]:,} and {counts[args.requests]:,})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--window", type=int, action="append", help="requests in flight (repeatable; default 1 and 16)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--version", type=int, default=9, help="Produce version (3-9)")
    parser.add_argument("--records", type=int, default=1,
                        help="raw client: records per request, one batch (50: bench_paper's batch 50 case)")
    parser.add_argument("--broker-loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--client", choices=("raw", "pulllog"), default="raw",
                        help="raw: the minimal socket client; pulllog: pulllog's Producer (window ignored)")
    parser.add_argument("--think-us", type=float, default=0, help="raw client: busy-wait this long before each send")
    parser.add_argument("--sleep-us", type=float, default=0, help="raw client: sleep this long before each send")
    parser.add_argument("--strace", action="store_true", help="count the broker's syscalls (one extra run per case)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count the broker's instructions per request with valgrind (window: the first given)")
    parser.add_argument("--keep", metavar="DIR", help="--callgrind: keep the profiles in DIR")
    parser.add_argument("--py-spy", metavar="DIR", help="record a py-spy profile per case into DIR (one extra run)")
    args = parser.parse_args()
    windows = args.window or [1, 16]

    from pulllog.records.batch import build_batch

    value = os.urandom(200)
    records = build_batch([(None, value)] * args.records)
    if args.callgrind:
        callgrind_case(args, produce_request(args.version, 1, "bench", records), windows[0])
        return
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        proc = subprocess.Popen([sys.executable, "-c", BROKER, tmp, args.broker_loop],
                                stdout=subprocess.PIPE, text=True)
        try:
            port = _ready_port(proc, "the broker did not start")
            request = produce_request(args.version, 1, "bench", records)
            run_case(port, request, 200, 1, version=args.version)  # warms up
            if args.client == "pulllog":
                windows = [1]

            def case(w: int) -> None:
                if args.client == "pulllog":
                    pulllog_client_case(port, args.requests, w, args.records)
                else:
                    run_case(port, request, args.requests, w, args.think_us, args.sleep_us, args.version)

            results: dict[int, list[tuple[float, float]]] = {w: [] for w in windows}
            switches: dict[int, list[tuple[float, float]]] = {w: [] for w in windows}
            for _ in range(args.runs):
                for w in windows:  # cases take turns: a busy spell hits them all
                    user, system = cpu_seconds(proc.pid)
                    voluntary, involuntary = context_switches(proc.pid)
                    case(w)
                    user2, system2 = cpu_seconds(proc.pid)
                    voluntary2, involuntary2 = context_switches(proc.pid)
                    results[w].append(((user2 - user) / args.requests * 1e6, (system2 - system) / args.requests * 1e6))
                    switches[w].append(((voluntary2 - voluntary) / args.requests,
                                        (involuntary2 - involuntary) / args.requests))
            import pulllog
            print(f"pulllog from {Path(pulllog.__file__).parent}; Produce v{args.version}, "
                  f"{args.requests} requests per run, {args.runs} runs, {args.broker_loop}")
            for w, runs in results.items():
                us = [u + s for u, s in runs]
                print(f"{args.client} window {w:3d}: broker CPU {statistics.median(us):6.1f} us/request "
                      f"(range {min(us):.1f}-{max(us):.1f}; user {statistics.median(u for u, _ in runs):.1f}, "
                      f"system {statistics.median(s for _, s in runs):.1f}); context switches per request: "
                      f"voluntary {statistics.median(v for v, _ in switches[w]):.2f}, "
                      f"involuntary {statistics.median(i for _, i in switches[w]):.2f}")
            for w in windows:
                faults = minor_faults(proc.pid)
                case(w)
                print(f"window {w}: {(minor_faults(proc.pid) - faults) / args.requests:.2f} minor page faults per request")
                if args.strace:
                    out = Path(tmp) / f"strace-{w}.txt"
                    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(proc.pid)],
                                              stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                    case(w)
                    tracer.terminate()
                    tracer.wait()
                    print(f"window {w}: syscalls per request")
                    for line in out.read_text().splitlines():
                        parts = line.split()
                        if len(parts) >= 5 and parts[3].isdigit():
                            calls, name = int(parts[3]), parts[-1]
                            if calls >= args.requests // 20:
                                print(f"    {name:16s} {calls / args.requests:6.2f}")
                if args.py_spy:
                    Path(args.py_spy).mkdir(parents=True, exist_ok=True)
                    svg = Path(args.py_spy) / f"window-{w}.txt"
                    spy = subprocess.Popen(["py-spy", "record", "-p", str(proc.pid), "-r", "500", "-f", "raw",
                                            "-o", str(svg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                    case(w)
                    spy.send_signal(2)
                    spy.wait()
                    print(f"window {w}: py-spy profile in {svg}")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
