"""AddOffsetsToTxn (25): a producer will commit a group's offsets in its transaction
(``send_offsets_to_transaction``). The coordinator adds the group's ``__consumer_offsets``
partition to the transaction, so the commit or abort marker goes there too; the offsets
themselves come next in TxnOffsetCommit, to the group coordinator. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...group.coordinator import OFFSETS_TOPIC
from ...net.coordinator_keys import partition_for
from ...net.apis import ApiKey
from ...net.build import build, response_class
from . import RequestContext, coordinator_append_error, coordinator_flushes, handler
from .txn_errors import for_version

if TYPE_CHECKING:
    from ..api import BrokerApi


@handler(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> Any:
    from ...txn.coordinator import AddPartitionsRequest

    body = ctx.body
    partitions = broker.offsets_partition_count()
    offsets_partition = (OFFSETS_TOPIC, partition_for(body.group_id, partitions))
    with broker.collect_flushes() as flushes:
        codes = broker.transactions.add_partitions(AddPartitionsRequest(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), (offsets_partition,)))
    error = codes[offsets_partition]
    if (failed := await coordinator_flushes(flushes)) and error == ErrorCode.none:  # after the fsync / the ISR
        error = ErrorCode(coordinator_append_error(failed, ErrorCode.not_coordinator))
    code = for_version(error, ctx.version)
    return build(response_class(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version), {"throttle_time": 0, "error_code": code})
