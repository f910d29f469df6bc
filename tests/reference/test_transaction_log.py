"""pulllog's ``__transaction_state`` records are Kafka's: Kafka's own generated classes
(TransactionLogKey, TransactionLogValue, from the 4.1.1 jars) read pulllog's bytes, find the
fields pulllog wrote, and encode them again to the very same bytes, for both value versions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kafka_reference

from pulllog.txn.records import TransactionLogValue, encode_key, encode_value

TXN_LOG_CHECK = Path(__file__).parent / "java" / "TxnLogCheck.java"


def test_kafka_reads_and_writes_the_same_transaction_log_records() -> None:
    ongoing = TransactionLogValue(42, 3, 60_000, 1, (("b", 1), ("a", 0), ("a", 2)), 1_700_000_000_000,
                                  1_699_999_999_000, previous_producer_id=41)
    empty = TransactionLogValue(42, 3, 60_000, 0, (), 1_700_000_000_000, -1)
    args = ["k:" + encode_key("tx-é").hex(), "v:" + encode_value(ongoing).hex(), "v:" + encode_value(ongoing, 0).hex(),
            "v:" + encode_value(empty).hex()]
    cmd = kafka_reference.java_command(str(TXN_LOG_CHECK), *args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "key tx-é same=true",
        "value v1 pid=42 epoch=3 timeout=60000 state=1 partitions=a[0, 2]b[1] updated=1700000000000 "
        "started=1699999999000 previous=41 next=-1 same=true remaining=0",
        "value v0 pid=42 epoch=3 timeout=60000 state=1 partitions=a[0, 2]b[1] updated=1700000000000 "
        "started=1699999999000 previous=-1 next=-1 same=true remaining=0",
        "value v1 pid=42 epoch=3 timeout=60000 state=0 partitions=null updated=1700000000000 "
        "started=-1 previous=-1 next=-1 same=true remaining=0",
    ]
