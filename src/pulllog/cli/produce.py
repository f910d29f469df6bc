"""``pulllog produce TOPIC``: one record per input line, from stdin or ``--file``.

The summary (records sent, rate) goes to stderr so stdout stays clean for pipes. Every
record is acknowledged (per ``--acks``, by default "all" with the producer idempotent, as
the Producer's own defaults) before the command exits 0; if any failed, it says how many
and why, and exits 1.
"""

from __future__ import annotations

import sys
import time
from typing import BinaryIO

import click

from ..client.producer import Producer
from .common import bootstrap_server_option, parse_assignments, run_async
from .errors import EXIT_USAGE, CliError
from .help import examples

__all__ = ["produce"]


@click.command(epilog=examples(
    "seq 100 | pulllog produce orders",
    "printf 'customer-42:paid\\n' | pulllog produce orders --key-separator :",
    "pulllog produce orders --file events.txt --header source=import --compression zstd",
))
@click.argument("topic")
@click.option("--file", "path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Read lines from this file instead of stdin.")
@click.option("--key-separator", default=None, metavar="SEP",
              help="Split each line at the first SEP into key and value.")
@click.option("--partition", type=int, default=None, help="Send every record to this partition.")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", help="A header on every record (repeatable).")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True,
              help="all: idempotent, each record stored once and in order even across retries; "
                   "0 or 1: not idempotent (a retry may store a record twice).")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none",
              show_default=True)
@click.option("--batch-size", type=int, default=16384, show_default=True)
@click.option("--linger-ms", type=int, default=5, show_default=True)
@bootstrap_server_option
def produce(topic: str, path: str | None, key_separator: str | None, partition: int | None,
            headers: tuple[str, ...], acks: str, compression: str, batch_size: int, linger_ms: int,
            bootstrap_server: str) -> None:
    """Send lines from stdin (or --file) to TOPIC, one record per line."""
    if key_separator == "":
        raise CliError("--key-separator may not be empty", EXIT_USAGE)
    header_list = [(k, v.encode()) for k, v in parse_assignments(headers, "--header", "source=cli").items()]
    if path is not None:
        with open(path, "rb") as f:
            sent, elapsed = run_async(_produce, f, topic, key_separator, partition, header_list, acks, compression,
                                      batch_size, linger_ms, bootstrap_server, interrupt=True)
    else:
        # interrupt=True: the loop reads stdin blocking, so Ctrl-C must interrupt the read itself
        sent, elapsed = run_async(_produce, sys.stdin.buffer, topic, key_separator, partition, header_list, acks,
                                  compression, batch_size, linger_ms, bootstrap_server, interrupt=True)
    rate = sent / elapsed if elapsed > 0 else 0.0
    click.echo(f"sent {sent} record(s) to {topic} in {elapsed:.2f} s ({rate:,.0f} records/s)", err=True)


async def _produce(stream: BinaryIO, topic: str, key_separator: str | None, partition: int | None,
                   headers: list[tuple[str, bytes]], acks: str, compression: str, batch_size: int,
                   linger_ms: int, bootstrap_server: str) -> tuple[int, float]:
    sep = key_separator.encode() if key_separator is not None else None
    start = time.monotonic()
    futures = []
    async with Producer(bootstrap_server, client_id="pulllog-cli", acks=-1 if acks == "all" else int(acks),
                        compression=None if compression == "none" else compression, batch_size=batch_size,
                        linger_ms=linger_ms, max_block_ms=10_000, delivery_timeout_ms=30_000) as producer:
        for raw in stream:
            line = raw.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    key, value = None, line
            else:
                value = line
            futures.append(await producer.send(topic, value, key=key, headers=headers or None, partition=partition))
        await producer.flush()
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        raise CliError(f"{len(failures)} of {len(futures)} record(s) were not delivered: {failures[0]}")
    return len(futures), time.monotonic() - start
