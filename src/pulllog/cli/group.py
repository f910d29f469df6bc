"""``pulllog group list|describe|reset-offsets|delete``: consumer groups, and the paper's rewind.

``reset-offsets`` is a dry run unless ``--execute`` is given: it prints the plan (current
committed offset, new offset, per partition). It refuses while the group has active
members, because a running member would overwrite the reset with its next commit.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click
from rich.table import Table

from ..client.admin import Admin, GroupDescription, OffsetSpec
from ..client.errors import KafkaError
from ..client.types import TopicPartition
from .common import bootstrap_server_option, console, run_async
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError
from .help import examples

__all__ = ["group"]


@click.group(epilog=examples(
    "pulllog group list",
    "pulllog group describe billing",
    "pulllog group reset-offsets billing --topic orders --to-earliest --execute",
    "pulllog group delete billing audit",
))
def group() -> None:
    """List, describe, rewind and delete consumer groups."""


@group.command(name="list", epilog=examples("pulllog group list", "pulllog group list --json | jq .state"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group per line.")
@bootstrap_server_option
def list_(as_json: bool, bootstrap_server: str) -> None:
    """Every group the broker coordinates, with its state."""

    async def body() -> Any:
        async with Admin(bootstrap_server) as admin:
            return await admin.list_groups()

    groups = run_async(body)
    if as_json:
        for g in groups:
            click.echo(json.dumps({"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type}))
        return
    if not groups:
        click.echo("no consumer groups", err=True)
        return
    table = Table("group", "state", "protocol type", box=None, pad_edge=False)
    for g in groups:
        table.add_row(g.group_id, g.state, g.protocol_type)
    console().print(table)


async def _lag_rows(admin: Admin, desc: GroupDescription) -> list[dict[str, Any]]:
    committed = await admin.list_group_offsets(desc.group_id)
    owners = {tp: m for m in desc.members for tp in m.assignment}
    tps = sorted(set(committed) | set(owners))
    ends = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}) if tps else {}
    rows = []
    for tp in tps:
        end = ends.get(tp)
        end_offset = end.offset if end is not None else None
        offset = committed.get(tp, (None, ""))[0]
        member = owners.get(tp)
        rows.append({
            "topic": tp.topic, "partition": tp.partition, "committed_offset": offset,
            "log_end_offset": end_offset,
            "lag": (end_offset - offset) if (end_offset is not None and offset is not None) else None,
            "member_id": member.member_id if member else None,
            "client_id": member.client_id if member else None,
            "host": member.host if member else None,
        })
    return rows


@group.command(epilog=examples("pulllog group describe billing", "pulllog group describe billing --json"))
@click.argument("group_id", metavar="GROUP")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (the group, its members and lag).")
@bootstrap_server_option
def describe(group_id: str, as_json: bool, bootstrap_server: str) -> None:
    """State, members and, per partition, committed offset, log end offset and lag."""

    async def body() -> tuple[GroupDescription, list[dict[str, Any]]]:
        async with Admin(bootstrap_server) as admin:
            desc = await admin.describe_group(group_id)
            if desc.state == "Dead":
                raise CliError(f"group {group_id!r} does not exist; `pulllog group list` shows the groups")
            return desc, await _lag_rows(admin, desc)

    desc, rows = run_async(body)
    if as_json:
        click.echo(json.dumps({
            "group": desc.group_id, "state": desc.state, "protocol": desc.protocol,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.host,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]} for m in desc.members],
            "partitions": rows,
        }))
        return
    out = console()
    out.print(f"group {desc.group_id}: {desc.state}, protocol {desc.protocol or '-'}, {len(desc.members)} member(s)")
    if desc.members:
        members = Table("member id", "client id", "host", "partitions", box=None, pad_edge=False)
        for m in desc.members:
            parts = ", ".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
            members.add_row(m.member_id, m.client_id, m.host, parts)
        out.print(members)
    if rows:
        table = Table("topic", "partition", "committed", "log end", "lag", "owner", box=None, pad_edge=False)
        for r in rows:
            table.add_row(r["topic"], str(r["partition"]), _fmt(r["committed_offset"]), _fmt(r["log_end_offset"]),
                          _fmt(r["lag"]), r["client_id"] or "-")
        out.print(table)


def _fmt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _parse_datetime(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime {text!r}: expected ISO-8601, e.g. 2026-11-22T14:00:00+00:00", EXIT_USAGE) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as a person typing it means
    return int(when.timestamp() * 1000)


@group.command(name="reset-offsets", epilog=examples(
    "pulllog group reset-offsets billing --topic orders --to-earliest            # dry run: the plan",
    "pulllog group reset-offsets billing --topic orders --to-datetime 2026-11-22T14:00:00+00:00 --execute",
    "pulllog group reset-offsets billing --topic orders --partition 0 --shift-by -100 --execute",
))
@click.argument("group_id", metavar="GROUP")
@click.option("--topic", required=True, help="The topic whose offsets to reset.")
@click.option("--partition", "partitions", type=int, multiple=True, help="Only these partitions (repeatable).")
@click.option("--to-earliest", is_flag=True, help="The log start offset.")
@click.option("--to-latest", is_flag=True, help="The log end offset (skip everything).")
@click.option("--to-offset", type=int, default=None, help="An absolute offset.")
@click.option("--to-datetime", default=None, metavar="ISO", help="The first offset at or after this time.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (negative rewinds).")
@click.option("--execute", is_flag=True, help="Apply the plan. Without it, only show it.")
@bootstrap_server_option
def reset_offsets(group_id: str, topic: str, partitions: tuple[int, ...], to_earliest: bool, to_latest: bool,
                  to_offset: int | None, to_datetime: str | None, shift_by: int | None, execute: bool,
                  bootstrap_server: str) -> None:
    """Rewind (or skip) a group's committed offsets: the paper's rewind. Dry run by default."""
    chosen = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime is not None),
                                    ("--shift-by", shift_by is not None)) if on]
    if len(chosen) != 1:
        raise CliError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by",
                       EXIT_USAGE)
    target_ts = _parse_datetime(to_datetime) if to_datetime is not None else None

    async def body() -> list[tuple[TopicPartition, int | None, int]]:
        async with Admin(bootstrap_server) as admin:
            desc = await admin.describe_group(group_id)
            if desc.members:
                raise CliError(f"group {group_id!r} has {len(desc.members)} active member(s); stop its consumers "
                               "first, or they would overwrite the reset with their next commit")
            info = (await admin.describe_topics([topic]))[0]
            parts = sorted(p.partition for p in info.partitions)
            if partitions:
                missing = sorted(set(partitions) - set(parts))
                if missing:
                    raise CliError(f"topic {topic!r} has no partition {missing[0]} (it has {len(parts)})", EXIT_USAGE)
                parts = sorted(set(partitions))
            tps = [TopicPartition(topic, p) for p in parts]
            committed = await admin.list_group_offsets(group_id)
            bounds = {p.partition: (p.log_start_offset, p.log_end_offset) for p in info.partitions}
            plan = []
            by_time = {}
            if target_ts is not None:
                by_time = await admin.list_offsets({tp: OffsetSpec.for_timestamp(target_ts) for tp in tps})
            for tp in tps:
                start, end = bounds[tp.partition]
                current = committed.get(tp, (None, ""))[0]
                if to_earliest:
                    new = start
                elif to_latest:
                    new = end
                elif to_offset is not None:
                    new = to_offset
                elif target_ts is not None:
                    found = by_time.get(tp)
                    new = found.offset if found is not None else end
                else:
                    base = current if current is not None else start
                    new = base + (shift_by or 0)
                plan.append((tp, current, min(max(new, start), end)))
            if execute:
                await admin.alter_group_offsets(group_id, {tp: new for tp, _cur, new in plan})
            return plan

    plan = run_async(body)
    table = Table("topic", "partition", "current", "new", box=None, pad_edge=False)
    for tp, current, new in plan:
        table.add_row(tp.topic, str(tp.partition), _fmt(current), str(new))
    console().print(table)
    if execute:
        click.echo(f"reset {len(plan)} partition(s) of group {group_id}", err=True)
    else:
        click.echo("dry run: nothing changed; add --execute to apply this plan", err=True)


@group.command(epilog=examples("pulllog group delete billing", "pulllog group delete billing audit old-readers"))
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@bootstrap_server_option
def delete(group_ids: tuple[str, ...], bootstrap_server: str) -> None:
    """Delete groups (and their committed offsets). Refused while a group has members."""

    async def body() -> list[str | None]:
        """Each group's outcome: None when deleted, else why not. One group's failure does
        not stop the others."""
        outcomes: list[str | None] = []
        async with Admin(bootstrap_server) as admin:
            for group_id in ids:
                try:
                    await admin.delete_groups([group_id])
                except KafkaError as exc:
                    outcomes.append(str(exc))
                else:
                    outcomes.append(None)
        return outcomes

    ids = tuple(dict.fromkeys(group_ids))
    outcomes = run_async(body)
    for group_id, problem in zip(ids, outcomes):
        if problem is None:
            click.echo(f"deleted group {group_id!r}")
        else:
            click.echo(f"error: {problem}", err=True)
    if any(problem is not None for problem in outcomes):
        raise click.exceptions.Exit(EXIT_PROBLEM)
