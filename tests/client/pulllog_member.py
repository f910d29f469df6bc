"""A pulllog Consumer group member run as a child process, so that a test can SIGKILL it
(no LeaveGroup, no commit, no goodbye) or SIGSTOP it (a pause longer than its session).

Usage: ``python pulllog_member.py '<json spec>'`` with bootstrap, group_id, topic, options
(Consumer keyword arguments), batch (records per getmany), commit (after each batch with
``await consumer.commit()``), process_delay_s (per record), hang_after (stop for good after
processing that many records, before the batch is committed). It reports on stdout, one
JSON object a line, flushed at once:

* ``assigned`` / ``revoked`` / ``lost``: from the rebalance callbacks, with the generation;
* ``processed``: a record was processed (printed before any commit that covers it);
* ``committed``: ``await consumer.commit()`` returned, with the offsets it stored;
* ``commit_failed``: a commit raised, with the error's class and message;
* ``hanging``: it processed ``hang_after`` records and stopped, in the middle of a batch.

A line ``commit`` on stdin makes it commit offset 0 of partition 0 at once, whatever it owns.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pulllog.client.consumer import Consumer
from pulllog.client.types import TopicPartition


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def partitions(tps: set[TopicPartition]) -> list[int]:
    return sorted(tp.partition for tp in tps)


async def main() -> None:
    spec = json.loads(sys.argv[1])
    consumer: Consumer

    def on_assigned(tps: set[TopicPartition]) -> None:
        emit("assigned", generation=consumer.generation, partitions=partitions(tps))

    def on_revoked(tps: set[TopicPartition]) -> None:
        emit("revoked", generation=consumer.generation, partitions=partitions(tps))

    def on_lost(tps: set[TopicPartition]) -> None:
        emit("lost", partitions=partitions(tps))

    consumer = Consumer(spec["bootstrap"], group_id=spec["group_id"], client_id=spec.get("name", "member"),
                        on_partitions_assigned=on_assigned, on_partitions_revoked=on_revoked,
                        on_partitions_lost=on_lost, **spec["options"])

    async def commit() -> None:
        positions = {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}
        try:
            await consumer.commit()
        except Exception as exc:
            emit("commit_failed", error=type(exc).__name__, message=str(exc))
        else:
            emit("committed", offsets=positions)

    async def commands() -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            if line.strip() == "commit":  # an explicit offset: committed whatever the assignment is
                try:
                    await consumer.commit({TopicPartition(spec["topic"], 0): 0})
                except Exception as exc:
                    emit("commit_failed", error=type(exc).__name__, message=str(exc))
                else:
                    emit("committed", offsets={0: 0})

    async def consume() -> None:
        processed = 0
        while True:
            batch = await consumer.getmany(timeout_ms=100, max_records=spec.get("batch", 50))
            for tp, records in batch.items():
                for record in records:
                    await asyncio.sleep(spec.get("process_delay_s", 0))  # processing time (the behaviour under test)
                    emit("processed", partition=tp.partition, offset=record.offset)
                    processed += 1
                    if processed == spec.get("hang_after"):  # mid-batch: its commit is still to come
                        emit("hanging")
                        await asyncio.Event().wait()
            if batch and spec.get("commit"):
                await commit()

    async with consumer, asyncio.TaskGroup() as tg:
        consumer.subscribe([spec["topic"]])
        tg.create_task(commands())
        tg.create_task(consume())


if __name__ == "__main__":
    asyncio.run(main())
