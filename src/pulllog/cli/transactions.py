"""``pulllog transactions list|describe|describe-producers|abort|find-hanging``: what Kafka's
``kafka-transactions.sh`` does, against any Kafka-protocol broker.

A *hanging* transaction is open in a partition (its producer wrote transactional records
there) but its coordinator will never write the marker that ends it: the partition's last
stable offset stays at its first offset and read_committed consumers stop there.
``find-hanging`` lists the open transactions older than the maximum transaction timeout
that no coordinator lists for that partition; ``abort`` writes the abort marker for one
(found by ``--start-offset`` or ``--producer-id``, whose epochs DescribeProducers gives).

Differences from kafka-transactions.sh: ``describe-producers`` takes the topic as an argument
and, without ``--partition``, describes every partition of it; ``find-hanging`` searches every
topic when no ``--topic`` is given (a single broker holds every partition, so there is no
``--broker-id``); every listing has ``--json`` (one object per line).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.table import Table

from ..client.admin import Admin, OpenTransaction, ProducerState, TransactionDescription, TransactionListing
from ..client.types import TopicPartition
from .common import bootstrap_server_option, console, run_async
from .errors import EXIT_USAGE, CliError
from .help import examples

__all__ = ["transactions"]


@click.group(epilog=examples(
    "pulllog transactions list",
    "pulllog transactions describe payments-1",
    "pulllog transactions describe-producers orders --partition 0",
    "pulllog transactions find-hanging --topic orders",
    "pulllog transactions abort --topic orders --partition 0 --start-offset 1200",
))
def transactions() -> None:
    """List and describe transactions and producers; find and abort hanging transactions."""


def _none(value: int | None) -> str:
    return "None" if value is None else str(value)


@transactions.command(name="list", epilog=examples(
    "pulllog transactions list",
    "pulllog transactions list --state Ongoing --state PrepareCommit",
    "pulllog transactions list --producer-id 4000 --json",
))
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only transactions in this state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                   "CompleteAbort, PrepareEpochFence, Dead (repeatable).")
@click.option("--producer-id", "producer_ids", type=int, multiple=True, help="Only this producer id (repeatable).")
@click.option("--duration-filter", type=int, default=None, metavar="MS",
              help="Only transactional ids whose last transaction started more than MS milliseconds ago, in any "
                   "state (Kafka's filter; brokers with ListTransactions v1+).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per transactional id per line.")
@bootstrap_server_option
def list_(states: tuple[str, ...], producer_ids: tuple[int, ...], duration_filter: int | None, as_json: bool,
          bootstrap_server: str) -> None:
    """Every transactional id the brokers coordinate, with its producer id and state."""

    async def body() -> list[TransactionListing]:
        async with Admin(bootstrap_server) as admin:
            return await admin.list_transactions(states=states, producer_ids=producer_ids,
                                                 min_duration_ms=duration_filter)

    listings = run_async(body)
    if as_json:
        for t in listings:
            click.echo(json.dumps({"transactional_id": t.transactional_id, "coordinator": t.coordinator,
                                   "producer_id": t.producer_id, "state": t.state}))
        return
    table = Table("TransactionalId", "Coordinator", "ProducerId", "TransactionState", box=None, pad_edge=False)
    for t in listings:
        table.add_row(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state)
    console().print(table)


@transactions.command(epilog=examples("pulllog transactions describe payments-1",
                                      "pulllog transactions describe payments-1 --json"))
@click.argument("transactional_id", metavar="TRANSACTIONAL_ID")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@bootstrap_server_option
def describe(transactional_id: str, as_json: bool, bootstrap_server: str) -> None:
    """A transactional id's state at its coordinator: producer id and epoch, timeout, the
    ongoing transaction's start time and partitions."""
    if not transactional_id:
        raise CliError("the transactional id must not be empty", EXIT_USAGE)

    async def body() -> TransactionDescription:
        async with Admin(bootstrap_server) as admin:
            return await admin.describe_transaction(transactional_id)

    d = run_async(body)
    now = _now_ms()
    duration = None if d.start_time_ms is None else max(now - d.start_time_ms, 0)
    partitions = [f"{tp.topic}-{tp.partition}" for tp in d.partitions]
    if as_json:
        click.echo(json.dumps({"coordinator": d.coordinator, "transactional_id": d.transactional_id,
                               "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "state": d.state,
                               "timeout_ms": d.timeout_ms, "start_time_ms": d.start_time_ms,
                               "duration_ms": duration, "partitions": partitions}))
        return
    table = Table("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                  "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
                  box=None, pad_edge=False)
    table.add_row(str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
                  str(d.timeout_ms), _none(d.start_time_ms), _none(duration), ",".join(partitions))
    console().print(table)


@transactions.command(name="describe-producers", epilog=examples(
    "pulllog transactions describe-producers orders",
    "pulllog transactions describe-producers orders --partition 0 --json",
))
@click.argument("topic")
@click.option("--partition", "partitions", type=int, multiple=True,
              help="Only this partition (repeatable; default: every partition of the topic).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per producer per line.")
@bootstrap_server_option
def describe_producers(topic: str, partitions: tuple[int, ...], as_json: bool, bootstrap_server: str) -> None:
    """The active producers of a topic's partitions, as their leader keeps them: epoch, last
    sequence and timestamp, coordinator epoch, and the start offset of an open transaction."""

    async def body() -> dict[TopicPartition, list[ProducerState]]:
        async with Admin(bootstrap_server) as admin:
            wanted = sorted(set(partitions))
            if not wanted:
                wanted = [p.partition for p in (await admin.describe_topics([topic]))[0].partitions]
            return await admin.describe_producers([TopicPartition(topic, p) for p in sorted(wanted)])

    found = run_async(body)
    rows = [(tp, s) for tp in sorted(found, key=lambda tp: tp.partition) for s in found[tp]]
    if as_json:
        for tp, s in rows:
            click.echo(json.dumps({"topic": tp.topic, "partition": tp.partition, "producer_id": s.producer_id,
                                   "producer_epoch": s.producer_epoch, "coordinator_epoch": s.coordinator_epoch,
                                   "last_sequence": s.last_sequence, "last_timestamp": s.last_timestamp,
                                   "current_transaction_start_offset": s.current_txn_start_offset}))
        return
    table = Table("Partition", "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                  "LastTimestamp", "CurrentTransactionStartOffset", box=None, pad_edge=False)
    for tp, s in rows:
        table.add_row(str(tp.partition), str(s.producer_id), str(s.producer_epoch),
                      str(s.coordinator_epoch if s.coordinator_epoch is not None else -1), str(s.last_sequence),
                      str(s.last_timestamp), _none(s.current_txn_start_offset))
    console().print(table)


@transactions.command(epilog=examples(
    "pulllog transactions abort --topic orders --partition 0 --start-offset 1200",
    "pulllog transactions abort --topic orders --partition 0 --producer-id 4000",
    "pulllog transactions abort --topic orders --partition 0 --producer-id 4000 --producer-epoch 3 "
    "--coordinator-epoch 0",
))
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", type=int, required=True, help="The partition holding the hanging transaction.")
@click.option("--start-offset", type=int, default=None, help="The first offset of the transaction to abort.")
@click.option("--producer-id", type=int, default=None, help="The producer whose open transaction to abort.")
@click.option("--producer-epoch", type=int, default=None,
              help="With --producer-id and --coordinator-epoch: abort without asking the broker for them.")
@click.option("--coordinator-epoch", type=int, default=None,
              help="With --producer-id and --producer-epoch (a negative one is taken as 0, as Kafka's tool does).")
@bootstrap_server_option
def abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None, bootstrap_server: str) -> None:
    """Abort a hanging transaction in one partition: write its abort marker, so that the
    partition's last stable offset moves on. Meant for transactions no coordinator will end
    (see find-hanging): a live producer's transaction would be aborted under its feet."""
    if start_offset is None and producer_id is None:
        raise CliError("name the transaction to abort: --start-offset (see `pulllog transactions find-hanging`) "
                       "or --producer-id", EXIT_USAGE)
    if start_offset is not None and producer_id is not None:
        raise CliError("give --start-offset or --producer-id, not both", EXIT_USAGE)
    if (producer_epoch is None) != (coordinator_epoch is None) or (producer_epoch is not None and producer_id is None):
        raise CliError("--producer-epoch and --coordinator-epoch go together, with --producer-id", EXIT_USAGE)
    tp = TopicPartition(topic, partition)

    async def body() -> ProducerState | None:
        async with Admin(bootstrap_server) as admin:
            return await admin.abort_transaction(tp, start_offset=start_offset, producer_id=producer_id,
                                                 producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch)

    found = run_async(body)
    which = found.producer_id if found is not None else producer_id
    where = f" (started at offset {found.current_txn_start_offset})" if found is not None else ""
    click.echo(f"aborted producer {which}'s transaction in {topic}-{partition}{where}")


@transactions.command(name="find-hanging", epilog=examples(
    "pulllog transactions find-hanging",
    "pulllog transactions find-hanging --topic orders --partition 0",
    "pulllog transactions find-hanging --max-transaction-timeout 5 --json",
))
@click.option("--topic", default=None, help="Search only this topic (default: every topic).")
@click.option("--partition", type=int, default=None, help="Search only this partition (requires --topic).")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=15, show_default=True,
              metavar="MINUTES",
              help="The largest transaction timeout in use: only transactions open for longer are candidates.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hanging transaction per line.")
@bootstrap_server_option
def find_hanging(topic: str | None, partition: int | None, max_transaction_timeout: int, as_json: bool,
                 bootstrap_server: str) -> None:
    """Open transactions that no coordinator will end (hanging): open for longer than the
    maximum transaction timeout, and unknown to their coordinator or not listed there for
    this partition. Abort one with `pulllog transactions abort`."""
    if partition is not None and topic is None:
        raise CliError("--partition requires --topic", EXIT_USAGE)

    async def body() -> list[OpenTransaction]:
        async with Admin(bootstrap_server) as admin:
            if topic is None:
                tps = None
            elif partition is not None:
                tps = [TopicPartition(topic, partition)]
            else:
                tps = [TopicPartition(topic, p.partition) for p in (await admin.describe_topics([topic]))[0].partitions]
            return await admin.find_hanging_transactions(tps, max_transaction_timeout_ms=max_transaction_timeout * 60_000)

    hanging = run_async(body)
    now = _now_ms()
    rows: list[dict[str, Any]] = [{
        "topic": h.partition.topic, "partition": h.partition.partition, "producer_id": h.producer.producer_id,
        "producer_epoch": h.producer.producer_epoch,
        "coordinator_epoch": h.producer.coordinator_epoch if h.producer.coordinator_epoch is not None else -1,
        "start_offset": h.producer.current_txn_start_offset, "last_timestamp": h.producer.last_timestamp,
        "duration_min": (now - h.producer.last_timestamp) // 60_000} for h in hanging]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    table = Table("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                  "LastTimestamp", "Duration(min)", box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    console().print(table)


def _now_ms() -> int:
    return int(time.time() * 1000)
