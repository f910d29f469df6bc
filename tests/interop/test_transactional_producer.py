"""Until pulllog has transactions, a transactional producer must fail at once with a fatal
error naming the problem, not retry a retriable error until its own timeout (minutes).

FindCoordinator (key type TRANSACTION) and InitProducerId with a transactional.id answer
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: librdkafka (rdkafka_txnmgr.c, rdkafka_idempotence.c)
and the Java client's TransactionManager treat it as fatal for both requests."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka_wire import WireClient

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def test_a_transactional_producer_fails_with_a_fatal_error(pulllog_broker: Any) -> None:
    producer = Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers, "transactional.id": "tx-1"})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(120)  # a retriable answer would only end with this timeout
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal() and not error.retriable()
    assert "pulllog does not support transactions yet" in error.str()


def test_the_wire_answers_for_a_transactional_id(pulllog_broker: Any) -> None:
    with WireClient(pulllog_broker.port) as c:
        (coordinator,) = c.call("find_coordinator", 4, {"key_type": 1, "coordinator_keys": ["tx-1"]}).coordinators
        assert coordinator.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        init = c.call("init_producer_id", 4, {"transactional_id": "tx-1", "transaction_timeout": 60_000,
                                              "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        idempotent = c.call("init_producer_id", 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                    "producer_id": -1, "producer_epoch": -1})
        assert idempotent.error_code == 0 and idempotent.producer_id >= 0
