"""kio schemas that cannot carry what Kafka sends, corrected.

DescribeTransactions (65) v0: Kafka answers ``transaction_start_time`` -1 for a transaction
that has not started (state Empty, or a producer id without one), but kio types the field as
a non-negative datetime and refuses to decode -1. Here the field is a nullable datetime:
-1 reads as None, and None (or -1 ms) is written as -1.

(No ``from __future__ import annotations`` here: kio reads the field types at run time.)
"""

import dataclasses

from kio.schema.describe_transactions.v0 import response as _describe_transactions_v0
from kio.static.primitive import TZAware

__all__ = ["DescribeTransactionsResponseV0", "fixed_response_class"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TransactionStateV0(_describe_transactions_v0.TransactionState):
    transaction_start_time: TZAware | None = dataclasses.field(metadata={"kafka_type": "datetime_i64"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponseV0(_describe_transactions_v0.DescribeTransactionsResponse):
    transaction_states: tuple[TransactionStateV0, ...] = dataclasses.field(metadata={})


def fixed_response_class(kio_cls: type) -> type:
    """The corrected class for kio's response class ``kio_cls``, or ``kio_cls`` itself."""
    if kio_cls is _describe_transactions_v0.DescribeTransactionsResponse:
        return DescribeTransactionsResponseV0
    return kio_cls
