"""A cluster member's producer ids: blocks claimed from ZooKeeper, handed out on the loop.

Ids must be unique across the cluster (an idempotent or transactional producer is known by
its id on every broker it writes to), so each broker hands out ids from a block of
``PRODUCER_ID_BLOCK_SIZE`` that it claimed in ``/latest_producer_id_block`` (as Kafka's
ZooKeeper-mode brokers do; the claim is in :meth:`ClusterMembership.claim_producer_id_block`).

Invariants: :meth:`ClusterProducerIds.next_id` runs on the event loop and never blocks; the
claim (ZooKeeper round trips) runs in a thread. The next block is claimed when the current one
is nine tenths used, so a busy broker rarely waits; when it does (the current block used up,
the next not claimed yet) :meth:`next_id` raises :class:`ProducerIdsNotReady`, which the
handlers answer with COORDINATOR_LOAD_IN_PROGRESS, a retriable error (as Kafka's brokers do
while their id block is on its way). A single broker does not use this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cluster.znodes import ProducerIdBlock

__all__ = ["ClusterProducerIds", "ProducerIdsNotReady"]

log = logging.getLogger(__name__)


class ProducerIdsNotReady(Exception):
    """No producer id to hand out until the next block is claimed: retry."""


class ClusterProducerIds:
    """Producer ids from claimed blocks. ``claim`` blocks (it runs in a thread); ``spawn``
    runs a coroutine as one of the broker's tasks."""

    def __init__(self, claim: Callable[[], "ProducerIdBlock"],
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self._claim = claim
        self._spawn = spawn
        self._current: ProducerIdBlock | None = None
        self._next = 0
        self._prefetched: ProducerIdBlock | None = None
        self._claiming = False

    async def start(self) -> None:
        """Claim the first block (a broker's start, as Kafka's ZooKeeper-mode brokers do)."""
        self._current = await asyncio.to_thread(self._claim)
        self._next = self._current.first

    def next_id(self) -> int:
        current = self._current
        if current is None or self._next > current.last:
            if self._prefetched is None:
                self._claim_next()
                raise ProducerIdsNotReady("this broker's producer id block is used up; the next is being claimed")
            current, self._prefetched = self._prefetched, None
            self._current, self._next = current, current.first
        producer_id = self._next
        self._next += 1
        size = current.last - current.first + 1
        if current.last - producer_id < size // 10:
            self._claim_next()
        return producer_id

    def _claim_next(self) -> None:
        if self._claiming or self._prefetched is not None:
            return
        self._claiming = True
        self._spawn(self._claim_in_thread())

    async def _claim_in_thread(self) -> None:
        try:
            block = await asyncio.to_thread(self._claim)
        except Exception as exc:  # ZooKeeper away: the next next_id() tries again
            log.warning("claiming a producer id block failed: %s", exc)
        else:
            self._prefetched = block
        finally:
            self._claiming = False
