"""``pulllog cluster describe``: the brokers of a cluster, its controller, and the partitions
that are not whole.

Asks one broker (``--bootstrap-server``) with one Metadata request for every topic: a
cluster member answers with every live broker, the controller, and each partition's leader,
replicas and in-sync replicas (ISR); a single broker lists itself as both broker and
controller, and every partition led by it. Then lists, as ``kafka-topics.sh --describe``
does with ``--under-replicated-partitions`` and ``--unavailable-partitions``:

    under-replicated   fewer replicas in sync than assigned (a replica's broker is down, or
                       its follower fell behind by more than replica.lag.time.max.ms)
    offline            no leader at all: every in-sync replica is down; nothing can be
                       written or read until one returns (or an unclean election:
                       ``pulllog leader-election --election-type unclean``)

``--json`` prints one object with the same content. The exit code is 0 either way: the
command describes, it does not judge (scripts read the lists).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from ..client.admin import Admin, ClusterDescription, PartitionReplicas
from .common import bootstrap_server_option, console, run_async
from .help import examples

__all__ = ["cluster"]


@click.group(epilog=examples("pulllog cluster describe", "pulllog cluster describe --json"))
def cluster() -> None:
    """Look at the cluster: its brokers, controller and unhealthy partitions."""


@cluster.command(epilog=examples(
    "pulllog cluster describe --bootstrap-server 127.0.0.2:9092",
    "pulllog cluster describe --json | jq .under_replicated_partitions",
))
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: cluster id, controller, brokers, under-replicated and offline partitions.")
@bootstrap_server_option
def describe(as_json: bool, bootstrap_server: str) -> None:
    """The live brokers (id, address), which one is the controller, and the partitions that
    are under-replicated or offline."""

    async def body() -> tuple[ClusterDescription, list[PartitionReplicas]]:
        async with Admin(bootstrap_server) as admin:
            partitions = await admin.describe_replicas()
            return await admin.describe_cluster(), partitions

    described, partitions = run_async(body)
    under = [p for p in partitions if p.under_replicated and not p.offline]
    offline = [p for p in partitions if p.offline]
    if as_json:
        out: dict[str, Any] = {
            "cluster_id": described.cluster_id, "controller": described.controller_id,
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port} for b in described.brokers],
            "under_replicated_partitions": [_partition_json(p) for p in under],
            "offline_partitions": [_partition_json(p) for p in offline]}
        click.echo(json.dumps(out))
        return
    table = Table("broker", "address", "role", box=None, pad_edge=False)
    for b in described.brokers:
        table.add_row(str(b.node_id), f"{b.host}:{b.port}", "controller" if b.node_id == described.controller_id else "")
    out_console = console()
    out_console.print(table)
    if described.controller_id < 0:
        click.echo("no controller elected right now (one is being elected)", err=True)
    click.echo(f"{len(partitions)} partition(s): {len(under)} under-replicated, {len(offline)} offline")
    if under or offline:
        rows = Table("partition", "state", "leader", "replicas", "isr", "offline", box=None, pad_edge=False)
        for p in offline + under:
            rows.add_row(f"{p.topic}-{p.partition}", "offline" if p.offline else "under-replicated",
                         str(p.leader) if p.leader >= 0 else "none", _ids(p.replicas), _ids(p.isr),
                         _ids(p.offline_replicas))
        out_console.print(rows)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) or "-"


def _partition_json(p: PartitionReplicas) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "offline_replicas": list(p.offline_replicas)}
