#!/usr/bin/env python3
"""Append and read throughput of the segment log with 200-byte records.

Cases: batches of 1 record, 50 records, and ~16 KiB (what a Kafka producer's default
batch.size gives). Appends go through ``Log.append`` (validate + CRC check, offset patch,
one write into the page cache). Reads walk the whole log through ``Log.read`` with 1 MiB
fetches and copy the bytes out with pread (the broker uses sendfile instead).

Also answers the aiofiles question of issue 2: is the hot append path faster with a thread
hop (aiofiles) or with a plain write() into the page cache from the event loop?

    python scripts/bench_log.py [--records 200000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from pulllog.log import Log, LogConfig
from pulllog.records import build_batch

RECORD_SIZE = 200


def make_batches(total: int, per_batch: int) -> list[bytes]:
    value = os.urandom(RECORD_SIZE)
    one = build_batch([(None, value)] * per_batch)
    return [one] * (total // per_batch)


def bench_append(directory: Path, batches: list[bytes]) -> tuple[float, int]:
    log = Log.open(directory, LogConfig())
    start = time.perf_counter()
    for b in batches:
        log.append(b)
    elapsed = time.perf_counter() - start
    size = log.size_bytes
    log.close()
    return elapsed, size


def bench_read(directory: Path) -> tuple[float, int]:
    log = Log.open(directory, LogConfig())
    start = time.perf_counter()
    offset, total = 0, 0
    end = log.log_end_offset
    while offset < end:
        piece = log.read(offset, 1 << 20)
        if piece is None:
            break
        data = piece.read()
        total += len(data)
        # the next fetch starts after the last whole batch, as a consumer's would
        from pulllog.records.batch import iter_batches

        last = None
        for _pos, header in iter_batches(data):
            last = header
        offset = last.next_offset  # type: ignore[union-attr]
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, total


async def bench_write_paths(directory: Path, chunk: bytes, count: int) -> dict[str, float]:
    """Plain os.write on the loop thread vs aiofiles (a thread hop per write)."""
    import aiofiles

    results = {}
    path = directory / "plain.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        os.write(fd, chunk)
    results["os.write on the event loop"] = time.perf_counter() - start
    os.close(fd)
    async with aiofiles.open(directory / "aio.bin", "ab", buffering=0) as f:
        start = time.perf_counter()
        for _ in range(count):
            await f.write(chunk)
        results["aiofiles (thread hop)"] = time.perf_counter() - start
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="pulllog-bench-"))
    per_16k = 16384 // (RECORD_SIZE + 8)
    print(f"# pulllog log benchmark, {dt.date.today()}, {platform.machine()} {platform.processor() or ''}"
          f" {os.cpu_count()} cpu(s), Python {platform.python_version()}, data in {root}")
    print(f"# {args.records} records of {RECORD_SIZE} bytes\n")
    print("| batch | append rec/s | append MB/s | read rec/s | read MB/s | bytes/record on disk |")
    print("|---|---|---|---|---|---|")
    for label, per in [("1 record", 1), ("50 records", 50), (f"16 KiB ({per_16k} rec)", per_16k)]:
        d = root / f"bench-{per}"
        shutil.rmtree(d, ignore_errors=True)
        batches = make_batches(args.records, per)
        n = len(batches) * per
        t_append, size = bench_append(d, batches)
        t_read, read_bytes = bench_read(d)
        print(f"| {label} | {n / t_append:,.0f} | {size / t_append / 1e6:,.1f} | "
              f"{n / t_read:,.0f} | {read_bytes / t_read / 1e6:,.1f} | {size / n:.1f} |")
        shutil.rmtree(d, ignore_errors=True)
    try:
        chunk = make_batches(50, 50)[0]
        root.mkdir(parents=True, exist_ok=True)
        res = asyncio.run(bench_write_paths(root, chunk, 20_000))
        print("\n| write path (20,000 x 50-record batches) | writes/s |")
        print("|---|---|")
        for name, t in res.items():
            print(f"| {name} | {20_000 / t:,.0f} |")
    except ImportError:
        print("\n(aiofiles not installed: pip install -e '.[bench]' to compare write paths)")
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
