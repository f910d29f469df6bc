"""``pulllog cluster describe``: the brokers of a cluster and its controller.

Asks one broker (``--bootstrap-server``) with a Metadata request for no topic: a cluster
member answers with every broker registered in ZooKeeper and the elected controller; a single
broker lists itself as both.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from ..client.admin import Admin, ClusterDescription
from .common import bootstrap_server_option, console, run_async
from .help import examples

__all__ = ["cluster"]


@click.group(epilog=examples("pulllog cluster describe", "pulllog cluster describe --json"))
def cluster() -> None:
    """Look at the cluster: its brokers and controller."""


@cluster.command(epilog=examples(
    "pulllog cluster describe --bootstrap-server 127.0.0.2:9092",
    "pulllog cluster describe --json | jq .controller",
))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: cluster id, controller, brokers.")
@bootstrap_server_option
def describe(as_json: bool, bootstrap_server: str) -> None:
    """The live brokers (id, address) and which one is the controller."""

    async def body() -> ClusterDescription:
        async with Admin(bootstrap_server) as admin:
            return await admin.describe_cluster()

    described = run_async(body)
    if as_json:
        out: dict[str, Any] = {
            "cluster_id": described.cluster_id, "controller": described.controller_id,
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port} for b in described.brokers]}
        click.echo(json.dumps(out))
        return
    table = Table("broker", "address", "role", box=None, pad_edge=False)
    for b in described.brokers:
        table.add_row(str(b.node_id), f"{b.host}:{b.port}", "controller" if b.node_id == described.controller_id else "")
    console().print(table)
    if described.controller_id < 0:
        click.echo("no controller elected right now (one is being elected)", err=True)
