"""``pulllog consume TOPIC`` and ``pulllog tail TOPIC``: read a topic from any offset.

``--from-offset`` takes what a person means: ``earliest``, ``latest``, an offset ``N``,
``-N`` (N records before the end of each partition), or an ISO-8601 time. Without
``--follow`` the command stops at the end offsets it saw when it started (like ``kcat -e``);
with it, it waits for new records, as the paper's iterator does. ``tail`` is ``consume
--from-offset latest --follow``.

With ``--group`` the same rule holds: it stops at the log end of the partitions the group
assigned it unless ``--follow``. A group resumes from its committed offsets, so, as in
Kafka's console consumer (its ``--offset`` needs ``--partition``, which it refuses with
``--group``; ``--from-beginning`` only sets auto.offset.reset), ``--from-offset`` is only
where a group *without* committed offsets starts: ``earliest`` or ``latest``. An offset, ``-N`` or a time is refused with the
``group reset-offsets`` command that moves the group there. What was printed is committed
after each batch and on the way out, also on Ctrl-C / SIGTERM, and the member leaves the
group, so ``group reset-offsets`` and ``group delete`` work at once.

``--isolation-level read_committed`` prints only records of committed transactions (and
records written outside transactions), skipping aborted ones and the commit/abort markers, and
stops at the last stable offset rather than the log end; ``read_uncommitted`` (the default, as
in Kafka) prints every record.

Output formats: ``value`` (one value per line), ``kv`` (key TAB value), ``json`` (one object
per line, bytes as in ``pulllog.cli.json_bytes``). In ``value`` and ``kv`` a missing key or
value (null) prints as ``null``, as Kafka's console consumer does, and an empty one as nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

import click

from ..client.consumer import Consumer
from ..client.errors import KafkaError
from ..client.types import ConsumerRecord, TopicPartition
from .common import bootstrap_server_option, run_async, signals_stop_here
from .errors import EXIT_USAGE, CliError
from .help import examples
from .json_bytes import json_bytes

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


_NULL = b"null"  # Kafka's console consumer prints a missing key or value as null


def _plain(data: bytes | None) -> bytes:
    return _NULL if data is None else data


def _write(record: ConsumerRecord, fmt: str, out: Any) -> None:
    if fmt == "value":
        out.write(_plain(record.value) + b"\n")
    elif fmt == "kv":
        out.write(_plain(record.key) + b"\t" + _plain(record.value) + b"\n")
    else:
        out.write(json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": json_bytes(record.key), "value": json_bytes(record.value),
            "headers": [{"key": k, "value": json_bytes(v)} for k, v in record.headers],
        }).encode() + b"\n")


def _refuse_with_group(from_offset: str, how: str, topic: str, group: str) -> None:
    """A group resumes from its committed offsets; moving them is `group reset-offsets`."""
    if how in ("earliest", "latest"):
        return
    value = from_offset.strip()
    target = {"offset": f"--to-offset {value}", "time": f"--to-datetime {value}",
              "before_end": f"--to-latest (then --shift-by {value})"}[how]
    raise CliError(f"--from-offset {value} cannot be used with --group (as in Kafka's console consumer): a group "
                   f"resumes from its committed offsets; move them first with `pulllog group reset-offsets {group} "
                   f"--topic {topic} {target} --execute`, or drop --group", EXIT_USAGE)


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
    at = {tp: found.get(tp) for tp in tps}
    return {tp: ends[tp] if hit is None else hit.offset for tp, hit in at.items()}  # none at or after: the end


async def _consume(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None,
                   follow: bool, fmt: str, group: str | None, bootstrap_server: str,
                   isolation_level: str = "read_uncommitted") -> int:
    how, arg = _parse_from(from_offset)
    if group is not None:
        _refuse_with_group(from_offset, how, topic, group)
    out = sys.stdout.buffer
    reset = "latest" if how == "latest" else "earliest"
    async with Consumer(bootstrap_server, client_id="pulllog-cli", group_id=group, enable_auto_commit=False,
                        auto_offset_reset=reset, isolation_level=isolation_level) as consumer:
        available = sorted(await consumer.partitions_for_topic(topic))
        chosen = list(partitions) if partitions else available
        missing = sorted(set(chosen) - set(available))
        if missing:
            raise CliError(f"topic {topic!r} has no partition {missing[0]} (it has {len(available)})", EXIT_USAGE)
        tps = [TopicPartition(topic, p) for p in chosen]
        if group is not None:
            consumer.subscribe(topic)
            return await _print_as_member(consumer, out, fmt, max_messages, follow)
        targets = await _targets(consumer, tps, how, arg)
        stop_at = None if follow else await consumer.end_offsets(tps)
        consumer.assign(tps)
        for tp, offset in targets.items():  # no await since assign(): the fetcher has not moved
            consumer.seek(tp, offset)
        if stop_at is not None and all(targets[tp] >= stop_at[tp] for tp in tps):
            return 0
        return await _print(consumer, out, fmt, max_messages, stop_at)


async def _print(consumer: Consumer, out: Any, fmt: str, max_messages: int | None,
                 stop_at: dict[TopicPartition, int] | None) -> int:
    """Assigned partitions: print until ``stop_at`` (None: forever) or ``max_messages``."""
    count = 0
    while True:
        batches = await consumer.getmany(timeout_ms=500)
        for tp, records in batches.items():
            for record in records:
                if stop_at is not None and record.offset >= stop_at[tp]:
                    continue
                _write(record, fmt, out)
                count += 1
                if count == max_messages:
                    out.flush()
                    return count
        out.flush()
        if stop_at is not None and await _at_end(consumer, stop_at):
            return count


async def _print_as_member(consumer: Consumer, out: Any, fmt: str, max_messages: int | None, follow: bool) -> int:
    """As a group member: print, commit what was printed after each batch and on the way out
    (also when cancelled by a signal), and stop at the log end of the partitions the group
    assigned unless ``follow``. Leaving the group is the Consumer's close()."""
    printed: dict[TopicPartition, int] = {}  # next offset after each printed record: what is committed
    committed: dict[TopicPartition, int] = {}
    try:
        with signals_stop_here():
            return await _print_and_commit(consumer, out, fmt, max_messages, follow, printed, committed)
    finally:
        out.flush()
        if printed != committed:
            await _commit_on_the_way_out(consumer, printed)


async def _print_and_commit(consumer: Consumer, out: Any, fmt: str, max_messages: int | None, follow: bool,
                            printed: dict[TopicPartition, int], committed: dict[TopicPartition, int]) -> int:
    count = 0
    stop_at: dict[TopicPartition, int] = {}  # the log end of each partition, when it was first assigned
    while count != max_messages:
        batches = await consumer.getmany(timeout_ms=500)
        for tp, records in batches.items():
            for record in records:
                _write(record, fmt, out)
                printed[tp] = record.offset + 1
                count += 1
                if count == max_messages:
                    break
            if count == max_messages:
                break
        out.flush()
        if printed != committed:
            await consumer.commit(dict(printed))
            committed.clear()
            committed.update(printed)
        if not follow:
            assigned = consumer.assignment()
            new = [tp for tp in assigned if tp not in stop_at]
            if new:
                stop_at.update(await consumer.end_offsets(new))
            if assigned and await _at_end(consumer, {tp: stop_at[tp] for tp in assigned}):
                break
    return count


async def _commit_on_the_way_out(consumer: Consumer, printed: dict[TopicPartition, int]) -> None:
    try:
        await consumer.commit(dict(printed))
    except (KafkaError, ConnectionError, TimeoutError) as exc:  # the reason we leave matters more; say what is lost
        click.echo(f"warning: could not commit the last printed offsets ({exc}); the group will read them again",
                   err=True)


async def _at_end(consumer: Consumer, stop_at: dict[TopicPartition, int]) -> bool:
    for tp, end in stop_at.items():
        if await consumer.position(tp) < end:
            return False
    return True


def _run(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None, follow: bool,
         fmt: str, group: str | None, bootstrap_server: str, isolation_level: str = "read_uncommitted") -> None:
    try:
        count = run_async(_consume, topic, from_offset, partitions, max_messages, follow, fmt, group, bootstrap_server,
                          isolation_level)
    except BrokenPipeError:  # `pulllog consume ... | head`
        sys.stderr.close()
        return
    click.echo(f"consumed {count} record(s) from {topic}", err=True)


_FORMAT = click.option("--format", "fmt", type=click.Choice(["value", "kv", "json"]), default="value",
                       show_default=True,
                       help="value: one value per line; kv: key TAB value; json: one object per line, binary as "
                            "{\"base64\": ...}. A null key or value prints as null (in json: null).")
_ISOLATION = click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
                          default="read_uncommitted", show_default=True,
                          help="read_committed: only records of committed transactions (and non-transactional "
                               "ones), up to the last stable offset; read_uncommitted: every record, as in Kafka.")


@click.command(epilog=examples(
    "pulllog consume orders                          # every record, then stop at the end",
    "pulllog consume orders --from-offset -10 --format kv",
    "pulllog consume orders --from-offset 2026-11-22T14:00:00+00:00 --partition 0 --partition 2",
    "pulllog consume orders --group billing --follow  # resume where the group committed",
    "pulllog consume orders --isolation-level read_committed  # skip aborted transactions",
))
@click.argument("topic")
@click.option("--from-offset", default="earliest", show_default=True, metavar="earliest|latest|N|-N|ISO-TIME",
              help="Where to start in each partition. With --group: only earliest or latest, where a group without "
                   "committed offsets starts: a group resumes from its commits (Kafka's console consumer refuses "
                   "--offset with --group too, as --offset needs --partition); move a group with "
                   "`pulllog group reset-offsets`.")
@click.option("--partition", "partitions", type=int, multiple=True,
              help="Only this partition (repeatable; default: all). Not with --group.")
@click.option("--max-messages", type=click.IntRange(min=1), default=None, help="Stop after this many records.")
@click.option("--follow", is_flag=True, help="Keep waiting for new records instead of stopping at the log end.")
@click.option("--group", default=None,
              help="Consume as a member of this consumer group, committing what was printed; it leaves the group "
                   "on exit, also on Ctrl-C.")
@_FORMAT
@_ISOLATION
@bootstrap_server_option
def consume(topic: str, from_offset: str, partitions: tuple[int, ...], max_messages: int | None, follow: bool,
            group: str | None, fmt: str, isolation_level: str, bootstrap_server: str) -> None:
    """Print TOPIC's records to stdout, from any offset (rewind at will), up to the log end or --follow."""
    if group is not None and partitions:
        raise CliError("--group and --partition do not go together: the group assigns partitions", EXIT_USAGE)
    _run(topic, from_offset, partitions, max_messages, follow, fmt, group, bootstrap_server, isolation_level)


@click.command(epilog=examples("pulllog tail orders", "pulllog tail orders -n 20 --format json"))
@click.argument("topic")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start this many records before the end of each partition.")
@_FORMAT
@_ISOLATION
@bootstrap_server_option
def tail(topic: str, lines: int, fmt: str, isolation_level: str, bootstrap_server: str) -> None:
    """Follow TOPIC from its end, like tail -f."""
    _run(topic, f"-{lines}" if lines > 0 else "latest", (), None, True, fmt, None, bootstrap_server, isolation_level)
