"""A cluster member's controlled shutdown: hand its leaderships over before it leaves.

Kafka's ZooKeeper-mode broker (``KafkaServer.controlledShutdown``), on a clean stop
(SIGTERM, Ctrl-C) with ``controlled.shutdown.enable`` (default true):

1. it stops fetching as a follower, so no leader adds it back to an ISR (Kafka's controller
   sends it StopReplica for the same reason);
2. it sends ControlledShutdown (api key 7, v3: its broker id and broker epoch, the creation
   zxid of its registration) to the controller over the inter-broker exchange, or, when it is
   the controller, runs it itself; the controller moves every partition it leads to another
   in-sync replica and takes it out of the ISRs of the partitions it follows, and answers with
   the partitions it still leads (no other in-sync replica could take them);
3. an answer with none left: it waits (briefly) until its own views show it leads nothing,
   so its waiting acks=all Produces answer NOT_LEADER_OR_FOLLOWER and their producers go to
   the new leaders; then the broker's usual stop follows (connections, ZooKeeper session).
   Otherwise (partitions left, an error, no controller, no answer within
   ``_REQUEST_TIMEOUT_S``) it tries again after ``controlled.shutdown.retry.backoff.ms``, up to
   ``controlled.shutdown.max.retries`` attempts in all, then stops anyway.

Meanwhile the broker keeps serving: clients are answered (and redirected) until the end.

Different from Kafka: a retry is skipped when every partition left has no other replica that
is registered at all (a cluster's last broker stopping): no retry could move them, and Kafka's
broker would only wait ``max.retries`` x ``retry.backoff.ms`` for nothing. And with no
controller known (one just left), the backoff ends as soon as one is elected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..net.apis import ApiKey
from .inter_broker import exchange, registered_address

if TYPE_CHECKING:
    from .api import BrokerApi

__all__ = ["controlled_shutdown"]

log = logging.getLogger(__name__)

_VERSION = 3
_REQUEST_TIMEOUT_S = 30.0  # Kafka's controller.socket.timeout.ms
_VIEWS_TIMEOUT_S = 5.0  # for the new leaderships to reach this broker's own views


class _AttemptFailed(Exception):
    """One attempt got no usable answer (the message says why)."""


async def controlled_shutdown(broker: "BrokerApi") -> bool:
    """Run the controlled shutdown (module docstring); True when no partition was left."""
    cfg = broker.config
    membership = broker.membership
    assert membership is not None
    attempts = cfg.controlled_shutdown_max_retries
    if attempts <= 0:  # as Kafka's broker: no attempt at all
        log.warning("controlled.shutdown.max.retries is 0: stopping without a controlled shutdown")
        return False
    if broker.replicas is not None:
        broker.replicas.stop_fetching()
    backoff_s = cfg.controlled_shutdown_retry_backoff_ms / 1000
    try:
        broker_epoch = await asyncio.wait_for(asyncio.to_thread(membership.broker_epoch), _REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 (ZooKeeper away: the controller checks nothing then)
        log.warning("cannot read this broker's epoch (%s); asking without it", exc)
        broker_epoch = -1
    for attempt in range(1, attempts + 1):
        started = time.monotonic()
        asked = _controller(broker)
        try:
            remaining = await asyncio.wait_for(_ask(broker, broker_epoch), _REQUEST_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 (no answer, a refusal, ZooKeeper away: the next attempt)
            log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, exc or type(exc).__name__)
            remaining = None
        if remaining == []:
            await broker.wait_for_views(lambda: not _leads_replicated(broker), _VIEWS_TIMEOUT_S)
            log.info("controlled shutdown of broker %d succeeded (attempt %d, %.0f ms)", cfg.node_id, attempt,
                     (time.monotonic() - started) * 1000)
            return True
        if remaining:
            log.warning("controlled shutdown attempt %d of %d: broker %d still leads %s", attempt, attempts,
                        cfg.node_id, ", ".join(f"{t}-{p}" for t, p in remaining))
            if not _others_registered(broker, remaining):
                log.warning("no other replica of those is registered; not retrying")
                break
        if attempt < attempts:  # the backoff; it ends early when another controller is elected
            await broker.wait_for_views(lambda: _controller(broker) not in (-1, asked), backoff_s)
    log.warning("controlled shutdown of broker %d did not complete; stopping anyway", cfg.node_id)
    return False


async def _ask(broker: "BrokerApi", broker_epoch: int) -> list[tuple[str, int]]:
    """One ControlledShutdown: the partitions still led, or _AttemptFailed."""
    node = broker.config.node_id
    view = broker.cluster_view
    controller = _controller(broker)
    if controller < 0:
        raise _AttemptFailed("no controller is elected")
    membership = broker.membership
    assert membership is not None
    if controller == node:
        from ..cluster.errors import BrokerNotAvailableError, NotControllerError, StaleBrokerEpochError

        try:
            return await asyncio.to_thread(membership.controlled_shutdown, node, broker_epoch)
        except (NotControllerError, BrokerNotAvailableError, StaleBrokerEpochError) as exc:
            raise _AttemptFailed(str(exc)) from None
    address = registered_address(view, controller)
    if address is None:
        raise _AttemptFailed(f"the controller, broker {controller}, is not registered")
    reader, writer = await asyncio.open_connection(*address)
    try:
        response = await exchange(reader, writer, ApiKey.CONTROLLED_SHUTDOWN, _VERSION,
                                  {"broker_id": node, "broker_epoch": broker_epoch}, correlation_id=1,
                                  client_id=f"pulllog-controlled-shutdown-{node}")
    finally:
        writer.close()
    code = ErrorCode(response.error_code)
    if code != ErrorCode.none:
        raise _AttemptFailed(f"the controller, broker {controller}, answered {code.name.upper()}")
    return [(str(p.topic_name), int(p.partition_index)) for p in response.remaining_partitions]


def _leads_replicated(broker: "BrokerApi") -> bool:
    """This broker still leads a partition with more than one replica (as its views say)."""
    replicas = broker.replicas
    return replicas is not None and any(r.is_leader and len(r.replicas) > 1 for r in replicas.describe())


def _controller(broker: "BrokerApi") -> int:
    view = broker.cluster_view
    return view.controller_id if view is not None else -1


def _others_registered(broker: "BrokerApi", partitions: list[tuple[str, int]]) -> bool:
    """Some partition of ``partitions`` has another replica that is registered (could take it)."""
    view = broker.cluster_view
    registered = {b.broker_id for b in getattr(view, "brokers", ())}
    node = broker.config.node_id
    for key in partitions:
        partition = broker.partition_views.get(key)
        if partition is None or any(r != node and r in registered for r in partition.replicas):
            return True
    return False
