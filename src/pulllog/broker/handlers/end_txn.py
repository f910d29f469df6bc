"""EndTxn (26), v0-4: commit or abort the producer's transaction.

The coordinator logs PrepareCommit / PrepareAbort, writes the markers (broker/txn_markers.py)
and logs CompleteCommit / CompleteAbort before this answers. A retry after the outcome is
complete answers NONE; one while markers are still missing CONCURRENT_TRANSACTIONS; a commit
of a transaction that is aborting (or the reverse) INVALID_TXN_STATE. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2. When those appends make ``flush.messages`` due, the answer
waits for their fsyncs (off the event loop); a failed one answers NOT_COORDINATOR. v5 (KIP-890 part 2: an epoch bump per transaction) is not
served: it goes with Produce v12.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler
from .txn_errors import for_version

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.END_TXN, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...txn.coordinator import EndTxnRequest

    body = ctx.body
    with broker.collect_flushes() as flushes:
        code = broker.transactions.end_txn(EndTxnRequest(body.transactional_id, int(body.producer_id),
                                                         int(body.producer_epoch), bool(body.committed)))
    if (failed := await coordinator_flushes(flushes)) and code == ErrorCode.none:
        # flush.messages: the state and markers are fsynced before the answer (and in a
        # cluster replicated to the ISR); a failed fsync answers as a failed append (the
        # client retries; the next flush retries the records)
        code = ErrorCode(coordinator_append_error(failed, ErrorCode.not_coordinator))
    return build(response_class(ApiKey.END_TXN, ctx.version),
                 {"throttle_time": 0, "error_code": for_version(code, ctx.version)})
