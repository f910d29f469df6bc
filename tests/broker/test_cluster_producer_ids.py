"""A cluster member's producer ids on the loop: the next block is claimed (in a thread) before
the current one runs out, and while none is there the broker says so (retriable) instead of
blocking or handing out an id twice."""

from __future__ import annotations

import asyncio
import threading

import pytest
from waits import wait_until

from pulllog.broker.producer_ids import ClusterProducerIds, ProducerIdsNotReady
from pulllog.cluster.znodes import ProducerIdBlock, next_producer_id_block


class _Blocks:
    """Hands out consecutive blocks, as the znode would; a claim waits while ``gate`` is shut."""

    def __init__(self) -> None:
        self.last: ProducerIdBlock | None = None
        self.claims = 0
        self.gate = threading.Event()
        self.gate.set()

    def claim(self) -> ProducerIdBlock:
        self.gate.wait(30)
        self.last = next_producer_id_block(self.last, 1)
        self.claims += 1
        return self.last


async def test_the_next_block_is_claimed_before_the_current_runs_out() -> None:
    blocks = _Blocks()
    tasks: list[asyncio.Task[None]] = []
    ids = ClusterProducerIds(blocks.claim, lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro)))
    await ids.start()
    handed = [ids.next_id() for _ in range(900)]
    assert handed == list(range(900)) and blocks.claims == 1  # nine tenths: nothing claimed yet
    handed.append(ids.next_id())
    assert len(tasks) == 1
    await wait_until(tasks[0].done, "the next block claimed")
    assert blocks.claims == 2
    handed += [ids.next_id() for _ in range(1000)]  # the rest of the first block, then the second
    assert handed == list(range(1901))


async def test_no_id_while_the_next_block_is_on_its_way() -> None:
    blocks = _Blocks()
    tasks: list[asyncio.Task[None]] = []
    ids = ClusterProducerIds(blocks.claim, lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro)))
    await ids.start()
    blocks.gate.clear()  # ZooKeeper slow: the claim of the second block waits
    assert [ids.next_id() for _ in range(1000)] == list(range(1000))
    with pytest.raises(ProducerIdsNotReady):
        ids.next_id()
    assert len(tasks) == 1  # one claim under way, not one per request
    blocks.gate.set()
    await asyncio.gather(*tasks)
    assert ids.next_id() == 1000
