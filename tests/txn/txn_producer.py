"""A librdkafka transactional producer that opens a transaction, writes to it and then waits
to be killed (argv: bootstrap, topic, transactional id, transaction.timeout.ms). It prints
"sent" once its records are acknowledged."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Producer


def main() -> None:
    bootstrap, topic, transactional_id, timeout_ms = sys.argv[1:5]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": int(timeout_ms)})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"doomed-{i}".encode(), partition=i % 2)
    producer.flush(30)
    print("sent", flush=True)
    while True:
        time.sleep(60)  # until SIGKILL: no abort, no goodbye


if __name__ == "__main__":
    main()
