"""ElectLeaders (43) v0-2: preferred (0) or unclean (1) leader elections (KIP-183, KIP-460).

A cluster member serves it only as the controller (elsewhere NOT_CONTROLLER: clients send it
to the controller Metadata names, as Kafka's admin clients do). The controller runs the
elections at once, itself, rather than through Kafka's ``/admin/preferred_replica_election``
znode: asking it directly gives each partition its own answer (ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION),
which a znode the controller deletes when done cannot carry back. (The controller also honours
that znode, for Kafka's old tools.) The new leadership is written (conditionally, fenced by the
controller epoch) before the answer; brokers take up their roles from it as from any election.
v0 has no election type (preferred) and no top-level error code.

A single broker leads every partition already: ELECTION_NOT_NEEDED for each.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi

_CODES = {
    "ELECTION_NOT_NEEDED": ErrorCode.election_not_needed,
    "PREFERRED_LEADER_NOT_AVAILABLE": ErrorCode.preferred_leader_not_available,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": ErrorCode.eligible_leaders_not_available,
}


@handler(ApiKey.ELECT_LEADERS, 0, 2)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    body = ctx.body
    election = int(getattr(body, "election_type", 0))
    requested = (None if body.topic_partitions is None else
                 [(t.topic, int(p)) for t in body.topic_partitions for p in t.partitions])
    top_error = ErrorCode.none
    if election not in (0, 1):
        top_error, results = ErrorCode.invalid_request, {}
    elif broker.membership is None:
        results = _single_broker(broker, requested)
    else:
        from ...cluster.controller import ElectionError, ElectionType
        from ...cluster.errors import NotControllerError

        try:
            outcome = await asyncio.to_thread(broker.membership.elect_leaders, requested, ElectionType(election))
        except NotControllerError as exc:
            top_error, outcome = ErrorCode.not_controller, {}
            if ctx.version == 0:  # no top-level error: every partition says it
                outcome = {tp: exc for tp in requested or ()}
        results = {}
        for tp, result in outcome.items():
            if result is None:
                results[tp] = (ErrorCode.unknown_topic_or_partition, f"{tp[0]}-{tp[1]} does not exist")
            elif isinstance(result, NotControllerError):
                results[tp] = (ErrorCode.not_controller, str(result))
            elif isinstance(result, ElectionError):
                results[tp] = (_CODES.get(result.code, ErrorCode.unknown_server_error), result.message)
            else:
                results[tp] = (ErrorCode.none, None)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": code, "error_message": message})
    data: dict[str, Any] = {"throttle_time": 0, "replica_election_results": [
        {"topic": topic, "partition_result": entries} for topic, entries in by_topic.items()]}
    if ctx.version >= 1:
        data["error_code"] = top_error
    return build(response_class(ApiKey.ELECT_LEADERS, ctx.version), data)


def _single_broker(broker: "BrokerApi", requested: list[tuple[str, int]] | None) -> dict[tuple[str, int], Any]:
    if requested is None:
        requested = [(name, p.index) for name in broker.topics.names() for p in broker.topics.get(name).partitions.values()]
    out: dict[tuple[str, int], Any] = {}
    for topic, partition in requested:
        found = broker.topics.find(topic)
        if found is None or partition not in found.partitions:
            out[(topic, partition)] = (ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist")
        else:
            out[(topic, partition)] = (ErrorCode.election_not_needed,
                                       f"broker {broker.config.node_id}, the only replica, leads already")
    return out
