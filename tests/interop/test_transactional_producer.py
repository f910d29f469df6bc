"""The transaction coordinator's answers on the wire for what a transactional producer asks
first: FindCoordinator with key type TRANSACTION names this broker, InitProducerId with a
transactional.id hands out an id and a new epoch on each call (fencing the previous one), and
a timeout over transaction.max.timeout.ms is refused. The full flows with librdkafka are in
tests/txn/."""

from __future__ import annotations

from typing import Any

from kafka_wire import WireClient
from kio.schema.errors import ErrorCode


def test_the_wire_answers_for_a_transactional_id(pulllog_broker: Any) -> None:
    with WireClient(pulllog_broker.port) as c:
        (coordinator,) = c.call("find_coordinator", 4, {"key_type": 1, "coordinator_keys": ["tx-1"]}).coordinators
        assert (coordinator.error_code, coordinator.port) == (0, pulllog_broker.port)
        (empty,) = c.call("find_coordinator", 4, {"key_type": 1, "coordinator_keys": [""]}).coordinators
        assert empty.error_code == ErrorCode.invalid_request

        def init(timeout_ms: int) -> Any:
            return c.call("init_producer_id", 4, {"transactional_id": "tx-1", "transaction_timeout": timeout_ms,
                                                  "producer_id": -1, "producer_epoch": -1})

        first, second = init(60_000), init(60_000)
        assert first.error_code == second.error_code == 0
        assert second.producer_id == first.producer_id and second.producer_epoch == first.producer_epoch + 1
        assert init(900_001).error_code == ErrorCode.invalid_transaction_timeout
        idempotent = c.call("init_producer_id", 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                    "producer_id": -1, "producer_epoch": -1})
        assert idempotent.error_code == 0 and idempotent.producer_id not in (-1, first.producer_id)
