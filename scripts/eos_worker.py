#!/usr/bin/env python3
"""One consume-transform-produce worker: the process scripts/eos_crash.py SIGKILLs and restarts.

A group consumer (read_committed, static member ``eos-worker`` so a restarted process takes
its predecessor's place at once) reads the input topic; each poll's records become one
transaction: the transformed records (:func:`transform`) go to the output topic and the
consumer's positions go to the group with ``send_offsets_to_transaction``, then the
transaction commits. A restarted worker calls ``init_transactions`` with the same
transactional id, which fences its predecessor and aborts whatever it left open, and
resumes from the group's committed offsets: so each input record is in the committed output
exactly once however often the worker dies.

    python scripts/eos_worker.py BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP TRANSACTIONAL_ID \
        [--client pulllog|librdkafka] [--max-records 10]

It reports its progress on stdout, one line each, flushed, so that the driver can kill it at
a state (never after a delay): ``ready``, ``begin``, ``sent N`` (N records of the open
transaction acknowledged or queued), ``offsets``, ``committing``, ``committed N`` (records
committed by this process so far), ``done`` (every input partition's committed offset is
its end offset; exit 0). An abortable transaction error (the group rebalanced, the broker
restarted under a request) is handled as Kafka's clients advise: ``aborting ...``, abort the
transaction, seek back to the committed offsets, ``aborted``, go on. Any other error ends it
with ``error ...`` and exit status 3: the driver restarts it, as an operator would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import traceback
from collections.abc import Callable

INSTANCE_ID = "eos-worker"


def transform(value: bytes) -> bytes:
    """The output record for an input value (the driver computes the same to compare)."""
    return b"out|" + value


def emit(line: str) -> None:
    print(line, flush=True)


async def run_pulllog(args: argparse.Namespace) -> None:
    """The loop with pulllog's own Producer and Consumer."""
    from pulllog import AbortableTransactionError, Consumer, Producer, TopicPartition

    producer = Producer(args.bootstrap, transactional_id=args.transactional_id,
                        transaction_timeout_ms=args.transaction_timeout_ms, client_id="eos-producer")
    consumer = Consumer(args.bootstrap, group_id=args.group, group_instance_id=INSTANCE_ID,
                        isolation_level="read_committed", enable_auto_commit=False,
                        auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000,
                        client_id="eos-consumer")
    await producer.start()
    try:
        await producer.init_transactions()
        await consumer.start()
        try:
            consumer.subscribe([args.in_topic])
            emit("ready")
            committed = 0
            while True:
                batch = await consumer.getmany(timeout_ms=500, max_records=args.max_records)
                records = [r for recs in batch.values() for r in recs]
                if not records:
                    assignment = consumer.assignment()
                    if len(assignment) == args.partitions:
                        ends = await consumer.end_offsets(assignment)
                        if all([await consumer.position(tp) >= ends[tp] for tp in assignment]):
                            emit("done")
                            return
                    continue
                producer.begin_transaction()
                emit("begin")
                try:
                    for n, record in enumerate(records, 1):
                        assert record.value is not None
                        await producer.send(args.out_topic, transform(record.value), key=record.key)
                        emit(f"sent {n}")
                    offsets = {TopicPartition(tp.topic, tp.partition): recs[-1].offset + 1
                               for tp, recs in batch.items() if recs}
                    await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                    emit("offsets")
                    emit("committing")
                    await producer.commit_transaction()
                except AbortableTransactionError as exc:
                    # the Java client's rule: abort, then read again from the committed offsets
                    emit(f"aborting {exc}".replace("\n", " "))
                    await producer.abort_transaction()
                    for tp in consumer.assignment():
                        offset = await consumer.committed(tp)
                        if tp not in consumer.assignment():
                            continue  # revoked meanwhile: its next owner starts from the committed offset
                        if offset is None:
                            await consumer.seek_to_beginning(tp)
                        else:
                            consumer.seek(tp, offset)
                    emit("aborted")
                    continue
                committed += len(records)
                emit(f"committed {committed}")
        finally:
            await consumer.close()
    finally:
        await producer.close()


def run_librdkafka(args: argparse.Namespace) -> None:
    """The same loop with confluent-kafka's (librdkafka's) Producer and Consumer."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        KafkaException,
        Producer,
        TopicPartition,
    )

    # librdkafka >= 2.10 re-bootstraps when every broker it knows is down (a one-broker cluster
    # restarting): it decommissions the broker, which may stay cached as the group's
    # coordinator, and send_offsets_to_transaction then waits forever for it, past its timeout
    # (librdkafka issues #5511 and #5456; Apache Kafka 4.1.1 as the broker shows the same).
    # Without re-bootstrap the broker handle lives on and reconnects.
    recovery = {} if args.rebootstrap else {"metadata.recovery.strategy": "none"}
    # While the broker is down librdkafka's reconnect backoff doubles up to 10 s; the restarted
    # group coordinator loads the member and starts its 6 s session then (as Kafka's does), so
    # a member that reconnects later is removed and the group rebalances. Keep reconnects prompt.
    recovery["reconnect.backoff.max.ms"] = 1000
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 5, **recovery,
                         **({"debug": os.environ["EOS_RDKAFKA_DEBUG"]} if "EOS_RDKAFKA_DEBUG" in os.environ else {})})
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "group.instance.id": INSTANCE_ID, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, **recovery})
    try:
        producer.init_transactions(60)
        consumer.subscribe([args.in_topic])
        emit("ready")
        committed = 0
        while True:
            msgs = consumer.consume(args.max_records, 0.5)
            for m in msgs:
                error = m.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consumer error: {error}")
            records = [m for m in msgs if not m.error()]
            if not records:
                assignment = consumer.assignment()
                if len(assignment) == args.partitions:
                    # committed, not position(): librdkafka has no position for a partition
                    # it has read nothing from (one its predecessor finished)
                    committed_offsets = consumer.committed(assignment, timeout=60)
                    if all(tp.offset >= consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in committed_offsets):
                        emit("done")
                        return
                continue
            producer.begin_transaction()
            emit("begin")
            try:
                for n, m in enumerate(records, 1):
                    value = m.value()
                    assert value is not None
                    producer.produce(args.out_topic, transform(value), key=m.key())
                    emit(f"sent {n}")
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 60)
                emit("offsets")
                emit("committing")
                producer.commit_transaction(60)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                emit(f"aborting {exc}".replace("\n", " "))
                producer.abort_transaction(60)
                rewind = consumer.committed(consumer.assignment(), timeout=60)
                for tp in rewind:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                emit("aborted")
                continue
            committed += len(records)
            emit(f"committed {committed}")
    finally:
        consumer.close()
        producer.flush(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bootstrap")
    parser.add_argument("in_topic")
    parser.add_argument("out_topic")
    parser.add_argument("group")
    parser.add_argument("transactional_id")
    parser.add_argument("--client", choices=["pulllog", "librdkafka"], default="pulllog")
    parser.add_argument("--partitions", type=int, default=3, help="the input topic's partitions")
    parser.add_argument("--max-records", type=int, default=10, help="records per transaction, at most")
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    parser.add_argument("--rebootstrap", action="store_true",
                        help="librdkafka: keep its default metadata.recovery.strategy=rebootstrap, which "
                             "can hang send_offsets_to_transaction after a broker restart (librdkafka #5511)")
    args = parser.parse_args()
    run: Callable[[], object] = (lambda: asyncio.run(run_pulllog(args))) if args.client == "pulllog" \
        else (lambda: run_librdkafka(args))
    try:
        run()
    except BaseException as exc:  # noqa: BLE001 - any failure: report it in one line, exit 3
        emit(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        traceback.print_exc(file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
