"""``pulllog leader-election``: move partitions' leadership back to their preferred replica, or
give a leaderless partition an out-of-sync one (ElectLeaders, API 43).

The options are ``kafka-leader-election.sh``'s::

    --election-type preferred|unclean   (either case)
    --topic T [--partition P]           one partition, or (pulllog's addition) every
                                        partition of T when --partition is left out
    --all-topic-partitions              every partition of every topic
    --path-to-json-file F               {"partitions": [{"topic": "t", "partition": 0}, ...]}

A *preferred* election makes each partition's first assigned replica its leader again, if
that replica is in sync (after a broker's restart the leadership stays where failover put
it). An *unclean* election is for a partition with no leader at all: it elects a live replica
that is not in sync, and the records only the old leader had are lost.

Output, as Kafka's tool prints it: the partitions whose election succeeded, those that had
the right leader already ("Valid replica already elected"), and one line per failure. The
exit code is 1 when any partition failed, 0 otherwise (a single broker answers that every
partition has its leader already); a broker that does not serve ElectLeaders is one
``error:`` line and exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from kio.schema.errors import ErrorCode

from ..client.admin import Admin, ElectionType
from ..client.errors import KafkaError, UnsupportedByBrokerError
from ..client.types import TopicPartition
from .common import bootstrap_server_option, run_async
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["leader_election"]

_JSON_EXAMPLE = '{"partitions": [{"topic": "orders", "partition": 0}]}'


@click.command(name="leader-election", epilog=examples(
    "pulllog leader-election --election-type preferred --all-topic-partitions",
    "pulllog leader-election --election-type preferred --topic orders --partition 0",
    "pulllog leader-election --election-type unclean --topic orders --partition 2",
    "pulllog leader-election --election-type preferred --path-to-json-file partitions.json",
))
@click.option("--election-type", required=True, type=click.Choice(["preferred", "unclean"], case_sensitive=False),
              help="preferred: the first assigned replica, if in sync. unclean: any live replica of a partition "
                   "without a leader (may lose records).")
@click.option("--topic", default=None, help="The topic whose partition(s) to elect leaders for.")
@click.option("--partition", type=int, default=None, help="With --topic: only this partition.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of every topic.")
@click.option("--path-to-json-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"The partitions, as {_JSON_EXAMPLE}.")
@bootstrap_server_option
def leader_election(election_type: str, topic: str | None, partition: int | None, all_topic_partitions: bool,
                    path_to_json_file: Path | None, bootstrap_server: str) -> None:
    """Elect partitions' leaders: the preferred replica, or (unclean) any live replica."""
    chosen = [name for name, given in (("--topic", topic is not None), ("--all-topic-partitions", all_topic_partitions),
                                       ("--path-to-json-file", path_to_json_file is not None)) if given]
    if len(chosen) != 1:
        raise CliError("say which partitions: exactly one of --topic, --all-topic-partitions, --path-to-json-file"
                       + (f" (got {' and '.join(chosen)})" if chosen else ""), EXIT_USAGE)
    if partition is not None and topic is None:
        raise CliError("--partition needs --topic", EXIT_USAGE)
    kind = ElectionType[election_type.upper()]
    from_file = _partitions_from_json(path_to_json_file) if path_to_json_file is not None else None

    async def body() -> dict[TopicPartition, KafkaError | None]:
        async with Admin(bootstrap_server) as admin:
            wanted: list[TopicPartition] | None = from_file
            if topic is not None:
                if partition is not None:
                    wanted = [TopicPartition(topic, partition)]
                else:
                    wanted = [TopicPartition(topic, p.partition) for p in await admin.describe_replicas([topic])]
            try:
                return await admin.elect_leaders(kind, wanted)
            except UnsupportedByBrokerError as exc:
                raise CliError(f"{exc}: this broker cannot elect leaders (ElectLeaders, API 43); "
                               "ask a broker of a cluster that serves it", EXIT_PROBLEM) from None

    results = run_async(body)
    name = kind.name
    done = sorted((tp for tp, error in results.items() if error is None), key=_order)
    already = sorted((tp for tp, e in results.items() if e is not None and e.code == ErrorCode.election_not_needed),
                     key=_order)
    failed = sorted(((tp, e) for tp, e in results.items() if e is not None and e.code != ErrorCode.election_not_needed),
                    key=lambda item: _order(item[0]))
    if done:
        click.echo(f"Successfully completed leader election ({name}) for partitions {_names(done)}")
    if already:
        click.echo(f"Valid replica already elected for partitions {_names(already)}")
    if not results:
        click.echo(f"no partition needed a leader election ({name})")
    for tp, error in failed:
        click.echo(f"Error completing leader election ({name}) for partition {tp.topic}-{tp.partition}: {error}",
                   err=True)
    if failed:
        raise click.exceptions.Exit(EXIT_PROBLEM)


def _partitions_from_json(path: Path) -> list[TopicPartition]:
    try:
        document = json.loads(path.read_text())
        entries = document["partitions"]
        return [TopicPartition(str(e["topic"]), int(e["partition"])) for e in entries]
    except OSError as exc:
        raise CliError(f"--path-to-json-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    except (ValueError, KeyError, TypeError):
        raise CliError(f"--path-to-json-file {path}: expected {_JSON_EXAMPLE}", EXIT_USAGE) from None


def _order(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)
