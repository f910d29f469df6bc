"""``pulllog topic create|list|describe|alter|delete``: manage topics through the Admin client.

``describe`` shows, per topic, each partition's leader, replicas, in-sync replicas (ISR),
offline replicas (on a broker that is down; the column appears only when a partition has
some), log start / end offsets and size on disk (``?`` for a partition whose leader is down
or that has none), then every config with where its value comes from: ``override`` (set on
this topic), ``broker`` (the broker's server.properties or command line) or ``default``
(Kafka's). ``list`` and ``describe`` take ``--json``: one JSON object per topic per line,
sizes in bytes, for scripts.

Exit codes (``pulllog.cli.errors``): 0 success; 1 the broker refused or cannot be reached
(unknown topic, topic already exists, invalid config, ...); 2 bad usage.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..client.admin import Admin, AlterConfigOp, ConfigEntry, ConfigResource, ConfigSource, TopicDescription
from ..client.errors import TopicAlreadyExistsError, UnknownTopicError
from .common import bootstrap_server_option, console, parse_assignments, run_async
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["topic"]

_CONFIG_EXAMPLE = "retention.ms=86400000"


@click.group(epilog=examples(
    "pulllog topic create orders --partitions 3",
    "pulllog topic list",
    "pulllog topic describe orders",
    "pulllog topic alter orders --config retention.ms=86400000",
    "pulllog topic delete orders",
))
def topic() -> None:
    """Create, list, describe, alter, delete and reassign topics."""


# ---------------------------------------------------------------------------- create


@topic.command(epilog=examples(
    "pulllog topic create orders --partitions 3",
    "pulllog topic create orders --partitions 6 --replication-factor 3",
    "pulllog topic create orders --replica-assignment 1:2:3,2:3:1,3:1:2",
    "pulllog topic create orders --config retention.ms=86400000 --config cleanup.policy=compact --if-not-exists",
))
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=None, help="Partition count. Default: the broker's num.partitions.")
@click.option("--replication-factor", type=int, default=None,
              help="Copies of each partition, on that many brokers. Default: the broker's default.replication.factor.")
@click.option("--replica-assignment", default=None, metavar="B:B:B,B:B:B,...",
              help="Place the replicas yourself: per partition (comma-separated) its brokers (colon-separated), "
                   "the first its preferred leader. Instead of --partitions and --replication-factor.")
@click.option("--config", "configs", multiple=True, metavar="NAME=VALUE",
              help=f"A topic config, e.g. --config {_CONFIG_EXAMPLE} (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly if the topic already exists.")
@click.option("--validate-only", is_flag=True, help="Ask the broker to check everything, create nothing.")
@bootstrap_server_option
def create(name: str, partitions: int | None, replication_factor: int | None, replica_assignment: str | None,
           configs: tuple[str, ...], if_not_exists: bool, validate_only: bool, bootstrap_server: str) -> None:
    """Create topic NAME."""
    overrides = parse_assignments(configs, "--config", _CONFIG_EXAMPLE)
    if partitions is not None and partitions < 1:
        raise CliError(f"--partitions {partitions}: a topic needs at least 1 partition", EXIT_USAGE)
    if replication_factor is not None and replication_factor < 1:
        raise CliError(f"--replication-factor {replication_factor}: a partition needs at least 1 replica", EXIT_USAGE)
    assignment = None
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            raise CliError("--replica-assignment gives the partitions and their replicas: "
                           "leave out --partitions and --replication-factor", EXIT_USAGE)
        assignment = parse_replica_assignment(replica_assignment)

    async def body() -> str:
        async with Admin(bootstrap_server) as admin:
            try:
                created = await admin.create_topic(name, partitions, replication_factor=replication_factor,
                                                   configs=overrides, validate_only=validate_only,
                                                   replica_assignment=assignment)
            except TopicAlreadyExistsError:
                if if_not_exists:
                    return f"topic {name!r} already exists"
                raise
        what = f"{created.partitions} partition{'s' if created.partitions != 1 else ''}"
        # replicated, or asked for: say how many copies (a single broker's topics have one)
        if created.replication_factor > 1 or (created.replication_factor > 0 and (replication_factor or assignment)):
            what += f", replication factor {created.replication_factor}"
        if validate_only:
            return f"topic {name!r} with {what} would be created (--validate-only: nothing changed)"
        return f"created topic {name!r} with {what}"

    click.echo(run_async(body))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics.sh's ``--replica-assignment``: ``1:2:3,2:3:1`` is partition 0 on brokers
    1, 2, 3 and partition 1 on 2, 3, 1; every partition needs as many replicas, each on a
    different broker."""
    out: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in part.split(":")]
        except ValueError:
            raise CliError(f"--replica-assignment {text}: partition {index}'s replicas {part!r} are not broker ids; "
                           "write e.g. 1:2:3,2:3:1", EXIT_USAGE) from None
        if len(set(brokers)) != len(brokers):
            raise CliError(f"--replica-assignment {text}: partition {index} has a broker twice ({part})", EXIT_USAGE)
        if out and len(brokers) != len(out[0]):
            raise CliError(f"--replica-assignment {text}: every partition needs the same number of replicas "
                           f"(partition 0 has {len(out[0])}, partition {index} {len(brokers)})", EXIT_USAGE)
        out[index] = brokers
    return out


# ---------------------------------------------------------------------------- list


@topic.command(name="list", epilog=examples("pulllog topic list", "pulllog topic list --internal --json"))
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets, ...).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per topic per line.")
@bootstrap_server_option
def list_(internal: bool, as_json: bool, bootstrap_server: str) -> None:
    """List topics with their partition counts."""

    async def body() -> Any:
        async with Admin(bootstrap_server) as admin:
            return await admin.list_topics(include_internal=internal)

    listings = run_async(body)
    if as_json:
        for t in listings:
            click.echo(json.dumps({"name": t.name, "partitions": t.partitions, "internal": t.internal,
                                   "topic_id": str(t.topic_id) if t.topic_id else None}))
        return
    if not listings:
        click.echo("no topics yet; create one with `pulllog topic create NAME`", err=True)
        return
    table = _table("TOPIC", ("PARTITIONS", "right"))
    for t in listings:
        table.add_row(t.name, str(t.partitions))
    console().print(table)


# ---------------------------------------------------------------------------- describe


@topic.command(epilog=examples("pulllog topic describe orders", "pulllog topic describe orders refunds --json"))
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per topic per line.")
@bootstrap_server_option
def describe(names: tuple[str, ...], as_json: bool, bootstrap_server: str) -> None:
    """Partitions (leader, log start / end offsets, size) and configs of each topic NAME."""
    names = tuple(dict.fromkeys(names))

    async def body() -> list[tuple[TopicDescription, dict[str, ConfigEntry]]]:
        async with Admin(bootstrap_server) as admin:
            descriptions = await admin.describe_topics(names)
            configs = await asyncio.gather(*(admin.describe_configs(ConfigResource.topic(n)) for n in names))
        return list(zip(descriptions, configs))

    results = run_async(body)
    if as_json:
        for description, configs in results:
            click.echo(json.dumps(_describe_json(description, configs)))
        return
    out = console()
    for i, (description, configs) in enumerate(results):
        if i:
            out.print()
        _print_description(out, description, configs)


def _source(entry: ConfigEntry) -> str:
    if entry.is_override:
        return "override"
    if entry.source in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG):
        return "broker"
    if entry.source is ConfigSource.DEFAULT_CONFIG:
        return "default"
    return entry.source.name.lower()


def _describe_json(d: TopicDescription, configs: dict[str, ConfigEntry]) -> dict[str, Any]:
    return {
        "name": d.name,
        "topic_id": str(d.topic_id) if d.topic_id else None,
        "internal": d.internal,
        "size_bytes": d.size_bytes,
        "partitions": [
            {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr),
             "offline_replicas": list(p.offline_replicas), "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset, "size_bytes": p.size_bytes}
            for p in d.partitions
        ],
        "configs": {name: {"value": None if e.sensitive else e.value, "source": _source(e)}
                    for name, e in sorted(configs.items())},
    }


def _print_description(out: Any, d: TopicDescription, configs: dict[str, ConfigEntry]) -> None:
    n = len(d.partitions)
    title = Text.assemble((f"Topic {d.name}", "bold"), f"  {n} partition{'s' if n != 1 else ''}")
    if d.size_bytes is not None:
        title.append(f", {format_size(d.size_bytes)} on disk")
    if d.topic_id:
        title.append(f"  (id {d.topic_id})", style="dim")
    out.print(title)
    # the OFFLINE column only when a broker holding a replica is down: it is empty otherwise
    offline = any(p.offline_replicas for p in d.partitions)
    parts = _table(("PARTITION", "right"), ("LEADER", "right"), "REPLICAS", "ISR", *(("OFFLINE",) if offline else ()),
                   ("LOG START", "right"), ("LOG END", "right"), ("SIZE", "right"))
    for p in d.partitions:
        reachable = p.log_end_offset >= 0
        parts.add_row(str(p.partition), str(p.leader) if p.leader >= 0 else Text("none", style="bold red"),
                      ",".join(map(str, p.replicas)),
                      Text(",".join(map(str, p.isr)), style="yellow" if len(p.isr) < len(p.replicas) else ""),
                      *((",".join(map(str, p.offline_replicas)),) if offline else ()),
                      str(p.log_start_offset) if reachable else "?", str(p.log_end_offset) if reachable else "?",
                      "?" if p.size_bytes is None else format_size(p.size_bytes))
    out.print(parts)
    out.print()
    table = _table("CONFIG", "VALUE", "SOURCE")
    # overrides first: they are what makes this topic differ from the others
    for name, entry in sorted(configs.items(), key=lambda kv: (not kv[1].is_override, kv[0])):
        style = "bold" if entry.is_override else "dim" if entry.is_default else ""
        value = "(sensitive)" if entry.sensitive else (entry.value if entry.value is not None else "null")
        table.add_row(Text(name, style=style), Text(value, style=style), Text(_source(entry), style=style))
    out.print(table)


def format_size(n: int) -> str:
    """Bytes for people: ``512 B``, ``1.5 KiB``, ``12.0 MiB``."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def _table(*columns: str | tuple[str, str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        name, justify = (column, "left") if isinstance(column, str) else column
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return table


# ---------------------------------------------------------------------------- alter


@topic.command(epilog=examples(
    "pulllog topic alter orders --partitions 6",
    "pulllog topic alter orders --config retention.ms=3600000 --delete-config segment.bytes",
))
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=None, help="Grow the topic to this many partitions.")
@click.option("--config", "configs", multiple=True, metavar="NAME=VALUE",
              help=f"Set a topic config, e.g. --config {_CONFIG_EXAMPLE} (repeatable).")
@click.option("--delete-config", "deletes", multiple=True, metavar="NAME",
              help="Remove an override, back to the default (repeatable).")
@bootstrap_server_option
def alter(name: str, partitions: int | None, configs: tuple[str, ...], deletes: tuple[str, ...],
          bootstrap_server: str) -> None:
    """Add partitions to topic NAME or change its configs (others keep their values)."""
    overrides = parse_assignments(configs, "--config", _CONFIG_EXAMPLE)
    if partitions is None and not overrides and not deletes:
        raise CliError("nothing to change: give --partitions, --config or --delete-config", EXIT_USAGE)

    async def body() -> list[str]:
        done = []
        async with Admin(bootstrap_server) as admin:
            # Only overrides can be removed: say which names were not set instead of "removed".
            current = await admin.describe_configs(ConfigResource.topic(name), keys=deletes) if deletes else {}
            unknown = [k for k in deletes if k not in current]
            if unknown:
                raise CliError(f"--delete-config {unknown[0]}: topic {name!r} has no config {unknown[0]!r}; "
                               f"`pulllog topic describe {name}` lists them", EXIT_USAGE)
            removed = [k for k in dict.fromkeys(deletes) if current[k].is_override]
            ops = [AlterConfigOp.set(k, v) for k, v in overrides.items()] + [AlterConfigOp.delete(k) for k in removed]
            if ops:
                await admin.incremental_alter_configs(ConfigResource.topic(name), ops)
                done += [f"set {k}={v}" for k, v in overrides.items()] + [f"removed {k}" for k in removed]
            done += [f"{k} was not set (nothing to remove)" for k in dict.fromkeys(deletes) if k not in removed]
            if partitions is not None:
                await admin.create_partitions(name, partitions)
                done.append(f"now {partitions} partitions")
        return done

    done = run_async(body)
    changed = bool(overrides or partitions is not None or any(d.startswith("removed ") for d in done))
    click.echo(f"{'altered' if changed else 'nothing changed on'} topic {name!r}: " + ", ".join(done))


# ---------------------------------------------------------------------------- delete


@topic.command(epilog=examples("pulllog topic delete orders", "pulllog topic delete orders refunds --if-exists"))
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed quietly for topics that do not exist.")
@bootstrap_server_option
def delete(names: tuple[str, ...], if_exists: bool, bootstrap_server: str) -> None:
    """Delete each topic NAME and all of its records."""

    async def body() -> None:
        async with Admin(bootstrap_server) as admin:
            for name in names:
                try:
                    await admin.delete_topic(name)
                except UnknownTopicError:
                    if not if_exists:
                        raise CliError(f"topic {name!r} does not exist (see `pulllog topic list`)", EXIT_PROBLEM)
                    continue
                click.echo(f"deleted topic {name!r}")

    run_async(body)


# ---------------------------------------------------------------------------- reassign (cli/reassign.py)

def _add_reassignment_commands() -> None:
    from .reassign import reassign, reassignments

    topic.add_command(reassign)
    topic.add_command(reassignments)


_add_reassignment_commands()
