"""``pulllog consume TOPIC`` and ``pulllog tail TOPIC``: read a topic from any offset.

``--from-offset`` takes what a person means: ``earliest``, ``latest``, an offset ``N``,
``-N`` (N records before the end of each partition), or an ISO-8601 time. Without
``--follow`` the command stops at the end offsets it saw when it started (like ``kcat -e``);
with it, it waits for new records, as the paper's iterator does. ``tail`` is ``consume
--from-offset latest --follow``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from typing import Any

import click

from ..client.consumer import Consumer
from ..client.types import ConsumerRecord, TopicPartition
from .common import bootstrap_server_option, run_async
from .errors import EXIT_USAGE, CliError

__all__ = ["consume", "tail"]


def _parse_from(text: str) -> tuple[str, Any]:
    value = text.strip()
    if value in ("earliest", "beginning"):
        return "earliest", None
    if value in ("latest", "end"):
        return "latest", None
    try:
        n = int(value)
        return ("before_end", n) if n < 0 else ("offset", n)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"--from-offset {text!r}: use earliest, latest, an offset N, -N (N before the end) "
                       "or an ISO-8601 time like 2026-11-22T14:00:00+00:00", EXIT_USAGE) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return "time", int(when.timestamp() * 1000)


def _text(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _write(record: ConsumerRecord, fmt: str, out: Any) -> None:
    if fmt == "value":
        out.write((record.value or b"") + b"\n")
    elif fmt == "kv":
        out.write((record.key or b"") + b"\t" + (record.value or b"") + b"\n")
    else:
        out.write(json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
            "headers": [[k, _text(v)] for k, v in record.headers],
        }).encode() + b"\n")


async def _targets(consumer: Consumer, tps: list[TopicPartition], how: str, arg: Any) -> dict[TopicPartition, int]:
    """Where each partition starts, worked out before assigning, so nothing races the seeks."""
    starts = await consumer.beginning_offsets(tps)
    ends = await consumer.end_offsets(tps)
    if how == "earliest":
        return dict(starts)
    if how == "latest":
        return dict(ends)
    if how == "before_end":
        return {tp: max(starts[tp], ends[tp] + arg) for tp in tps}
    if how == "offset":
        for tp in tps:
            if not starts[tp] <= arg <= ends[tp]:
                raise CliError(f"offset {arg} is out of range for {tp.topic}-{tp.partition}: valid offsets are "
                               f"{starts[tp]}..{ends[tp]} ({ends[tp]} is the end)")
        return {tp: arg for tp in tps}
    found = await consumer.offsets_for_times({tp: arg for tp in tps})
    return {tp: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in tps}


async def _consume(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None,
                   follow: bool, fmt: str, group: str | None, bootstrap_server: str) -> int:
    how, arg = _parse_from(from_offset)
    out = sys.stdout.buffer
    count = 0
    reset = "earliest" if how == "earliest" else "latest"
    done: dict[TopicPartition, int] = {}  # next offset after each printed record: what a group commits
    async with Consumer(bootstrap_server, client_id="pulllog-cli", group_id=group, enable_auto_commit=False,
                        auto_offset_reset=reset) as consumer:
        available = sorted(await consumer.partitions_for_topic(topic))
        chosen = list(partitions) if partitions else available
        missing = sorted(set(chosen) - set(available))
        if missing:
            raise CliError(f"topic {topic!r} has no partition {missing[0]} (it has {len(available)})", EXIT_USAGE)
        tps = [TopicPartition(topic, p) for p in chosen]
        if group is not None:
            consumer.subscribe(topic)
            stop_at: dict[TopicPartition, int] | None = None
        else:
            targets = await _targets(consumer, tps, how, arg)
            stop_at = None if follow else await consumer.end_offsets(tps)
            consumer.assign(tps)
            for tp, offset in targets.items():  # no await since assign(): the fetcher has not moved
                consumer.seek(tp, offset)
        pending = None
        if stop_at is not None:
            pending = {tp for tp in tps if targets[tp] < stop_at[tp]}
            if not pending:
                return 0
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                for record in records:
                    if stop_at is not None and record.offset >= stop_at[tp]:
                        continue
                    _write(record, fmt, out)
                    done[tp] = record.offset + 1
                    count += 1
                    if max_messages is not None and count >= max_messages:
                        out.flush()
                        if group is not None:
                            await consumer.commit(dict(done))  # only what was printed
                        return count
            out.flush()
            if group is not None and batches:
                await consumer.commit(dict(done))
            if pending is not None and stop_at is not None:
                for tp in list(pending):
                    if await consumer.position(tp) >= stop_at[tp]:
                        pending.discard(tp)
                if not pending:
                    return count


def _run(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None, follow: bool,
         fmt: str, group: str | None, bootstrap_server: str) -> None:
    try:
        count = run_async(_consume, topic, from_offset, partitions, max_messages, follow, fmt, group, bootstrap_server)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `pulllog consume ... | head`
        sys.stderr.close()
        return
    click.echo(f"consumed {count} record(s) from {topic}", err=True)


_FORMAT = click.option("--format", "fmt", type=click.Choice(["value", "kv", "json"]), default="value",
                       show_default=True, help="json: one object per line; binary as {\"base64\": ...}.")


@click.command()
@click.argument("topic")
@click.option("--from-offset", default="earliest", show_default=True, metavar="earliest|latest|N|-N|ISO-TIME",
              help="Where to start in each partition.")
@click.option("--partition", "partitions", type=int, multiple=True, help="Only these partitions (default: all).")
@click.option("--max-messages", type=int, default=None, help="Stop after this many records.")
@click.option("--follow", is_flag=True, help="Keep waiting for new records instead of stopping at the end.")
@click.option("--group", default=None, help="Consume as a member of this consumer group and commit.")
@_FORMAT
@bootstrap_server_option
def consume(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None, follow: bool,
            group: str | None, fmt: str, bootstrap_server: str) -> None:
    """Print TOPIC's records to stdout, from any offset (rewind at will)."""
    if group is not None and partitions:
        raise CliError("--group and --partition do not go together: the group assigns partitions", EXIT_USAGE)
    _run(topic, from_offset, partitions, max_messages, follow or group is not None and max_messages is None,
         fmt, group, bootstrap_server)


@click.command()
@click.argument("topic")
@click.option("-n", "--lines", type=int, default=0, show_default=True,
              help="Start this many records before the end of each partition.")
@_FORMAT
@bootstrap_server_option
def tail(topic: str, lines: int, fmt: str, bootstrap_server: str) -> None:
    """Follow TOPIC from its end, like tail -f."""
    _run(topic, f"-{lines}" if lines > 0 else "latest", (), None, True, fmt, None, bootstrap_server)
