"""Producer ids are unique across a cluster: each broker hands out ids from blocks of 1000 it
claimed in ``/latest_producer_id_block`` (Kafka's ZooKeeper-mode format), claiming the next
block before the current one runs out."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until
from zk_brokers import Cluster

from pulllog.cluster.znodes import (
    PRODUCER_ID_BLOCK,
    ProducerIdBlock,
    ZnodeFormatError,
    decode_producer_id_block,
    encode_producer_id_block,
    next_producer_id_block,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def test_the_block_znode_in_kafkas_format() -> None:
    block = ProducerIdBlock(2, 1000, 1999)
    assert json.loads(encode_producer_id_block(block)) == {
        "version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}
    assert decode_producer_id_block(encode_producer_id_block(block)) == block
    assert decode_producer_id_block(b"") is None  # created empty at the first broker's start
    assert next_producer_id_block(None, 3) == ProducerIdBlock(3, 0, 999)
    assert next_producer_id_block(block, 1) == ProducerIdBlock(1, 2000, 2999)
    with pytest.raises(ZnodeFormatError):
        decode_producer_id_block(b'{"version":1,"broker":1}')


def _new_ids(broker: Any, count: int) -> list[int]:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    ids: list[int] = []
    with WireClient(int(port), host=host) as c:
        def init() -> int | None:
            answer = c.call("init_producer_id", 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                    "producer_id": -1, "producer_epoch": -1})
            if answer.error_code == ErrorCode.coordinator_load_in_progress:  # the next block on its way
                return None
            assert answer.error_code == 0 and answer.producer_epoch == 0
            return int(answer.producer_id)

        for _ in range(count):
            ids.append(block_until(init, f"a producer id from broker {broker.broker_id}"))
    return ids


def test_producer_ids_are_unique_across_brokers(cluster: Cluster, zk_client: KazooClient) -> None:
    # Broker 1 goes through more than a block (its next one claimed on the way), the others
    # hand out ids of their own blocks at the same time.
    ids = {1: _new_ids(cluster.broker(1), 1100), 2: _new_ids(cluster.broker(2), 300),
           3: _new_ids(cluster.broker(3), 300)}
    everything = [i for per_broker in ids.values() for i in per_broker]
    assert len(set(everything)) == len(everything)
    for per_broker in ids.values():
        assert per_broker == sorted(per_broker)  # a broker hands out its blocks in order
    raw, _stat = zk_client.get(cluster.path(PRODUCER_ID_BLOCK))
    data = json.loads(raw)
    assert set(data) == {"version", "broker", "block_start", "block_end"} and data["version"] == 1
    assert data["broker"] in cluster.brokers
    last = decode_producer_id_block(raw)
    assert last is not None and last.last - last.first == 999 and last.first % 1000 == 0
    # Every id handed out is in a claimed block: none above the last block's end, and at
    # least four blocks claimed (one per broker's start, broker 1's second).
    assert max(everything) <= last.last and last.first >= 3000
