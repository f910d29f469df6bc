#!/usr/bin/env python3
"""The producer client's CPU instructions per record, counted by valgrind (callgrind).

Wall-clock rates and even CPU seconds swing with whatever else runs on a shared machine;
instruction counts do not, so this is how two versions of the producer's per-record path
compare on a busy machine. For each case a client process runs under callgrind and
produces ``--records`` 200-byte records to a pulllog broker (its own process, not under
valgrind), with instructions counted only inside one marked call (callgrind's
``--toggle-collect`` on ``list_sort_impl``: the measured run is made from a ``sorted()`` key
function); a second client produces 0 records the same way, and the difference divided by
the records is the client's cost per record, the sender's share included.

* **natural**: per-message ``send()`` with the defaults (acks=1), as bench_paper's case;
* **batch50**: ``send_batch()`` of 50 values with ``batch_size=1`` (one set per request);
* **batch1**: per-message ``send()`` with ``batch_size=1`` (one record per request, the
  default 5 in flight): the request path's cost, which the other two share among many records.

A loop awaiting an empty ``async def`` with ``send()``'s signature costs about 2,000
instructions per call by itself on CPython 3.11, which is why ``send()`` returns a C awaitable
and its common case is C (``records.encoding.SendPath``) with no Python frame at all.

    python scripts/bench_producer_instructions.py [--records 20000] [--cases natural,batch50,batch1] [--repeat 3]
                                                  [--rusage]

The count is not exact from run to run: how many answers one read brings (so how many loop
turns and sender passes a request takes) depends on when the broker answers, and under
valgrind that spreads a batch-1 figure by 10-25% between runs of the same code. ``--repeat``
runs the measured client that many times and prints the median and the range; compare
versions by their medians.

``--rusage`` runs the same clients without valgrind and prints, per record (per set of 50 for
batch50), the measured run's wall-clock time (the broker's turns included), the client's user
and system CPU (``getrusage``), its voluntary and involuntary context switches, the event
loop's turns and the garbage collector's young (generation 0) collections: where a request's
time goes besides the instructions (system calls, wake-ups), on the machine's real clock, so
with the noise of whatever else runs (say the load).

Run it against another checkout with ``PYTHONPATH=/that/checkout/src``. Needs valgrind
(not for ``--rusage``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap

BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from pulllog.broker import Broker
    async def main():
        async with Broker(data_dir=sys.argv[1], port=int(sys.argv[2])):
            print("ready", flush=True)
            await asyncio.Event().wait()
    asyncio.run(main())
    """
)

CLIENT = textwrap.dedent(
    """
    import asyncio, os, sys
    from pulllog.client.producer import Producer
    case, n, bootstrap = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    value = os.urandom(200)

    async def run(producer, topic, count):
        if case in ("natural", "batch1"):
            for _ in range(count):
                await producer.send(topic, value, partition=0)
        else:
            values = [value] * 50
            for _ in range(count // 50):
                await producer.send_batch(topic, values, partition=0)
        await producer.flush()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    producer = Producer(bootstrap, acks=1, **({"batch_size": 1} if case in ("batch50", "batch1") else {}))
    loop.run_until_complete(producer.start())
    for topic in (f"warm-{case}", f"measured-{case}"):
        loop.run_until_complete(producer.partitions_for(topic))
    loop.run_until_complete(run(producer, f"warm-{case}", 3000))
    # only what runs inside sorted() is counted (--toggle-collect=list_sort_impl)
    sorted([0], key=lambda _: loop.run_until_complete(run(producer, f"measured-{case}", n)))
    loop.run_until_complete(producer.close())
    loop.close()
    """
)


# the measured run, counted from inside the client: CPU, context switches, loop turns, young collections
RUSAGE = CLIENT.replace(
    '''sorted([0], key=lambda _: loop.run_until_complete(run(producer, f"measured-{case}", n)))''',
    textwrap.dedent('''
    import gc, json, resource, time
    turns, young = [0], [0]
    run_once = loop._run_once
    def counted():
        turns[0] += 1
        run_once()
    loop._run_once = counted
    gc.callbacks.append(lambda phase, info: young.__setitem__(0, young[0] + (phase == "start" and info["generation"] == 0)))
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    loop.run_until_complete(run(producer, f"measured-{case}", n))
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    print(json.dumps({"wall": wall, "user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
                      "voluntary": after.ru_nvcsw - before.ru_nvcsw, "involuntary": after.ru_nivcsw - before.ru_nivcsw,
                      "turns": turns[0], "young": young[0]}))
    '''))


def rusage(case: str, records: int, bootstrap: str) -> dict[str, float]:
    """The measured run's counters per record (``--rusage``)."""
    done = subprocess.run([sys.executable, "-c", RUSAGE, case, str(records), bootstrap],
                          capture_output=True, text=True, check=True)
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: value / records for name, value in counts.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def instructions(case: str, records: int, bootstrap: str, out_dir: str) -> int:
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.%p.out",
               "--toggle-collect=list_sort_impl", sys.executable, "-c", CLIENT, case, str(records), bootstrap]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise SystemExit(f"no instruction count from callgrind:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--cases", default="natural,batch50")
    parser.add_argument("--repeat", type=int, default=1, help="measured runs per case (the median is printed)")
    parser.add_argument("--rusage", action="store_true",
                        help="no valgrind: CPU user/system µs, context switches, loop turns, young collections per record")
    args = parser.parse_args()
    if not args.rusage and shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="pulllog-instructions-") as tmp:
        port = free_port()
        broker = subprocess.Popen([sys.executable, "-c", BROKER, tmp, str(port)], stdout=subprocess.PIPE, text=True)
        try:
            assert broker.stdout is not None
            if broker.stdout.readline().strip() != "ready":
                raise SystemExit("the broker did not start")
            if args.rusage:
                print(f"{'case':10} {'records':>8} {'per':>7} {'wall µs':>8} {'user µs':>8} {'system µs':>10} {'vol. cs':>8} "
                      f"{'invol. cs':>10} {'turns':>6} {'young gc':>9}  median of {max(1, args.repeat)} (Python "
                      f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f})")
                for case in cases:
                    runs = [rusage(case, args.records, f"127.0.0.1:{port}") for _ in range(max(1, args.repeat))]
                    # per request: a set of 50 for batch50 (one set per request), a record otherwise
                    k = 50 if case == "batch50" else 1
                    m = {name: statistics.median(r[name] for r in runs) * k for name in runs[0]}
                    print(f"{case:10} {args.records:>8} {'set' if k > 1 else 'record':>7} {m['wall'] * 1e6:>8.2f} "
                          f"{m['user'] * 1e6:>8.2f} "
                          f"{m['system'] * 1e6:>10.2f} {m['voluntary']:>8.3f} {m['involuntary']:>10.3f} "
                          f"{m['turns']:>6.3f} {m['young']:>9.4f}", flush=True)
                return
            print(f"{'case':10} {'records':>8} {'instructions per record':>24}  (Python {sys.version.split()[0]}, "
                  f"load average {os.getloadavg()[0]:.1f})")
            for case in cases:
                baseline = instructions(case, 0, f"127.0.0.1:{port}", tmp)
                per_record = sorted((instructions(case, args.records, f"127.0.0.1:{port}", tmp) - baseline)
                                    / args.records for _ in range(max(1, args.repeat)))
                spread = f"  ({per_record[0]:,.0f}-{per_record[-1]:,.0f})" if len(per_record) > 1 else ""
                print(f"{case:10} {args.records:>8} {statistics.median(per_record):>24,.0f}{spread}", flush=True)
        finally:
            broker.terminate()
            broker.wait()


if __name__ == "__main__":
    main()
