"""Error codes of the transaction APIs as each request version knows them.

PRODUCER_FENCED (90) came with KIP-588: InitProducerId v4, AddPartitionsToTxn, AddOffsetsToTxn
and EndTxn v2. Older clients get INVALID_PRODUCER_EPOCH instead, as Kafka answers them.
TRANSACTION_ABORTABLE (KIP-890) is known from AddPartitionsToTxn v5; older ones hear
INVALID_TXN_STATE.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


def for_version(code: ErrorCode, version: int, *, fenced_since: int = 2,
                abortable_since: int | None = None) -> ErrorCode:
    if code == ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and (abortable_since is None or version < abortable_since):
        return ErrorCode.invalid_txn_state
    return code
