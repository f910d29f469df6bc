"""KIP-890 part 1 on the Produce path, as Kafka does it: a transactional batch is checked
with the transaction coordinator (is the partition in the producer's ongoing transaction?)
only when the partition has no transaction of that producer and epoch open yet; once its
first batch is appended, the rest of the transaction's batches there need no check. A real
broker and pulllog's transactional producer in one event loop, the coordinator's ``verify``
counted as it is called (it still answers)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kio.schema.errors import ErrorCode

from pulllog.broker import Broker
from pulllog.broker.topics import PartitionError
from pulllog.client.producer import Producer


async def test_only_the_first_batch_of_a_transaction_in_a_partition_is_verified(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path, port=0) as broker:
        broker.topics.create("verified", 1)
        coordinator = broker.transactions
        asked: list[tuple[int, tuple[tuple[str, int], ...]]] = []
        verify = coordinator.verify

        def counted(transactional_id: str | None, producer_id: int, producer_epoch: int,
                    partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
            partitions = tuple(partitions)
            asked.append((producer_epoch, partitions))
            return verify(transactional_id, producer_id, producer_epoch, partitions)

        coordinator.verify = counted  # type: ignore[method-assign]
        # batch_size=1: every record is its own batch (and Produce request)
        async with Producer(f"127.0.0.1:{broker.port}", transactional_id="verified-tx", batch_size=1) as producer:
            await producer.init_transactions()
            for _ in range(2):
                producer.begin_transaction()
                for i in range(3):
                    await (await producer.send("verified", f"v{i}".encode(), partition=0))
                await producer.commit_transaction()
        assert partition_log_end(broker) == 6 + 2  # six records and two commit markers
    # six batches in two transactions: one check per transaction, for its first batch
    assert [partitions for _epoch, partitions in asked] == [(("verified", 0),), (("verified", 0),)]


def partition_log_end(broker: Broker) -> int:
    partition_log = broker.partition("verified", 0)
    assert not isinstance(partition_log, PartitionError)
    return partition_log.log_end_offset
