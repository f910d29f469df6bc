"""``pulllog topic reassign`` and ``pulllog topic reassignments``: move a partition's replicas
to other brokers (AlterPartitionReassignments, API 45) and list the moves under way
(ListPartitionReassignments, API 46), as ``kafka-reassign-partitions.sh --execute / --cancel
/ --list`` do.

    pulllog topic reassign orders --partition 0 --replicas 2,3
    pulllog topic reassign orders --partition 0 --cancel
    pulllog topic reassign --reassignment-json-file move.json [--cancel]
    pulllog topic reassignments [TOPIC...] [--json]

``--replicas`` lists the brokers that will hold the partition, the first its preferred
leader. The controller starts the move and the command returns: the new replicas copy the
partition from its leader, and once all are in sync the old ones are dropped (their copies
deleted) and, if the leader was one of them, a new one is elected. ``reassignments`` shows
what is still moving. ``--cancel`` puts a partition back on its replicas from before.

The JSON file is kafka-reassign-partitions.sh's: ``{"version": 1, "partitions": [{"topic":
"orders", "partition": 0, "replicas": [2, 3]}]}`` (``log_dirs``, if given, must all be
``"any"``: pulllog has one data directory per broker). With ``--cancel`` the replicas are
ignored and each partition's reassignment is cancelled.

Exit codes: 0 every partition accepted; 1 any refused (one line each: the partition and why)
or the cluster cannot be reached; 2 bad usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..client.admin import Admin, PartitionReassignment
from ..client.errors import KafkaError, UnsupportedByBrokerError
from ..client.types import TopicPartition
from .common import bootstrap_server_option, run_async
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["reassign", "reassignments"]

_JSON_EXAMPLE = '{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3]}]}'


@click.command(epilog=examples(
    "pulllog topic reassign orders --partition 0 --replicas 2,3",
    "pulllog topic reassign orders --partition 0 --cancel",
    "pulllog topic reassign --reassignment-json-file move.json",
))
@click.argument("name", required=False)
@click.option("--partition", type=int, default=None, help="The partition of topic NAME to move.")
@click.option("--replicas", default=None, metavar="B,B,...",
              help="The brokers to hold the partition, comma-separated; the first is its preferred leader.")
@click.option("--cancel", is_flag=True, help="Cancel the reassignment under way: back to the replicas from before.")
@click.option("--reassignment-json-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"The partitions and their replicas, as kafka-reassign-partitions.sh's {_JSON_EXAMPLE}.")
@bootstrap_server_option
def reassign(name: str | None, partition: int | None, replicas: str | None, cancel: bool,
             reassignment_json_file: Path | None, bootstrap_server: str) -> None:
    """Move partitions to other brokers (or --cancel a move under way)."""
    wanted = _wanted(name, partition, replicas, cancel, reassignment_json_file)

    async def body() -> dict[TopicPartition, KafkaError | None]:
        async with Admin(bootstrap_server) as admin:
            try:
                return await admin.alter_partition_reassignments(wanted)
            except UnsupportedByBrokerError as exc:
                raise CliError(f"{exc}: this broker cannot reassign partitions (AlterPartitionReassignments, "
                               "API 45); ask a broker of a pulllog cluster", EXIT_PROBLEM) from None

    results = run_async(body)
    done = sorted((tp for tp, error in results.items() if error is None), key=_order)
    failed = sorted(((tp, e) for tp, e in results.items() if e is not None), key=lambda item: _order(item[0]))
    if done:
        verb = "cancelled" if cancel else "started"
        click.echo(f"Successfully {verb} partition reassignment{'s' if len(done) > 1 else ''} for {_names(done)}")
    for tp, error in failed:
        click.echo(f"error: {tp.topic}-{tp.partition}: {error}", err=True)
    if failed:
        raise click.exceptions.Exit(EXIT_PROBLEM)


@click.command(epilog=examples("pulllog topic reassignments", "pulllog topic reassignments orders --json"))
@click.argument("names", metavar="[NAME...]", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition per line.")
@bootstrap_server_option
def reassignments(names: tuple[str, ...], as_json: bool, bootstrap_server: str) -> None:
    """List the partition reassignments in progress (of topics NAME..., or all)."""

    async def body() -> dict[TopicPartition, PartitionReassignment]:
        async with Admin(bootstrap_server) as admin:
            try:
                found = await admin.list_partition_reassignments()
            except UnsupportedByBrokerError as exc:
                raise CliError(f"{exc}: this broker cannot list reassignments (ListPartitionReassignments, "
                               "API 46); ask a broker of a pulllog cluster", EXIT_PROBLEM) from None
        return {tp: r for tp, r in found.items() if not names or tp.topic in names}

    found = run_async(body)
    for tp in sorted(found, key=_order):
        r = found[tp]
        if as_json:
            click.echo(json.dumps({"topic": tp.topic, "partition": tp.partition, "replicas": list(r.replicas),
                                   "adding_replicas": list(r.adding_replicas),
                                   "removing_replicas": list(r.removing_replicas)}))
        else:
            click.echo(f"{tp.topic}-{tp.partition}: replicas {_ids(r.replicas)}, adding {_ids(r.adding_replicas)}, "
                       f"removing {_ids(r.removing_replicas)}")
    if not found and not as_json:
        click.echo("no partition reassignment is in progress")


def _wanted(name: str | None, partition: int | None, replicas: str | None, cancel: bool,
            json_file: Path | None) -> dict[TopicPartition, list[int] | None]:
    if json_file is not None:
        if name is not None or partition is not None or replicas is not None:
            raise CliError("give either --reassignment-json-file or NAME --partition P, not both", EXIT_USAGE)
        return {tp: None if cancel else targets for tp, targets in _from_json(json_file).items()}
    if name is None or partition is None:
        raise CliError("say what to move: NAME --partition P --replicas B,B,... (or --reassignment-json-file F)",
                       EXIT_USAGE)
    if cancel == (replicas is not None):
        raise CliError("give exactly one of --replicas B,B,... and --cancel", EXIT_USAGE)
    return {TopicPartition(name, partition): None if cancel else _broker_ids(str(replicas), "--replicas")}


def _broker_ids(text: str, option: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise CliError(f"{option} {text!r}: expected broker ids separated by commas, e.g. 1,2,3", EXIT_USAGE) from None
    return ids


def _from_json(path: Path) -> dict[TopicPartition, list[int]]:
    try:
        document = json.loads(path.read_text())
        out: dict[TopicPartition, list[int]] = {}
        for entry in document["partitions"]:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            targets = [int(r) for r in entry["replicas"]]
            dirs = entry.get("log_dirs")
            if dirs is not None and any(d != "any" for d in dirs):
                raise CliError(f"--reassignment-json-file {path}: {tp.topic}-{tp.partition} names log_dirs {dirs}; "
                               "pulllog has one data directory per broker: leave them out or give \"any\"", EXIT_USAGE)
            out[tp] = targets
    except OSError as exc:
        raise CliError(f"--reassignment-json-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    except (ValueError, KeyError, TypeError):
        raise CliError(f"--reassignment-json-file {path}: expected {_JSON_EXAMPLE}", EXIT_USAGE) from None
    if not out:
        raise CliError(f"--reassignment-json-file {path}: no partitions in it; expected {_JSON_EXAMPLE}", EXIT_USAGE)
    return out


def _order(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)


def _ids(ids: Any) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"
