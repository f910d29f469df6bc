"""A confluent-kafka group member run as a child process, so a test can SIGKILL it.

Usage: ``python crash_member.py '<json spec>'`` with name, config, topic, commit_every,
process_delay_s. It reports on stdout, one JSON object a line, flushed at once:

* ``assigned`` / ``revoked``: from the rebalance callbacks, with the generation;
* ``processed``: a record was processed (printed before any commit that covers it);
* ``committed``: a synchronous commit succeeded, with the offsets it stored.

With ``commit_every`` > 0 auto-commit is off and the member commits its position after
every ``commit_every`` processed records: at-least-once, so a kill between two commits
leaves processed-but-uncommitted records for the next owner to process again.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def generation(consumer: Consumer) -> int:
    return int(struct.unpack_from("=i", bytes(consumer.consumer_group_metadata()), 7)[0])


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = dict(spec["config"])
    commit_every = int(spec["commit_every"])
    if commit_every:
        config["enable.auto.commit"] = False
    consumer = Consumer(config)
    cooperative = config.get("partition.assignment.strategy") == "cooperative-sticky"

    def on_assign(c: Consumer, parts: list[Any]) -> None:
        emit("assigned", generation=generation(c), partitions=sorted(p.partition for p in parts),
             incremental=cooperative)

    def on_revoke(c: Consumer, parts: list[Any]) -> None:
        emit("revoked", partitions=sorted(p.partition for p in parts))

    consumer.subscribe([spec["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    since_commit = 0
    while True:
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        time.sleep(spec["process_delay_s"])  # processing time: the test kills the member mid-batch
        emit("processed", partition=msg.partition(), offset=msg.offset())
        since_commit += 1
        if commit_every and since_commit >= commit_every:
            try:
                stored = consumer.commit(asynchronous=False)
            except KafkaException:
                continue  # e.g. a rebalance: the records stay uncommitted, to be processed again
            since_commit = 0
            emit("committed", offsets={str(tp.partition): tp.offset for tp in stored or []})


if __name__ == "__main__":
    main()
