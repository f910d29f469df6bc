"""kio schemas corrected where they cannot carry what Kafka sends (pulllog.net.kio_fixes)."""

from __future__ import annotations

import datetime

import pytest

from pulllog.net.build import build, response_class
from pulllog.net.protocol import decode_response, encode_response


@pytest.mark.parametrize("start, expected", [
    (-1, None),  # Kafka's "no transaction started" (an Empty transactional id)
    (None, None),
    (1_795_631_376_871, datetime.datetime(2026, 11, 25, 18, 29, 36, 871000, tzinfo=datetime.timezone.utc)),
])
def test_describe_transactions_start_time_may_be_minus_one(start: int | None,
                                                           expected: datetime.datetime | None) -> None:
    answer = build(response_class("describe_transactions", 0), {"throttle_time": 0, "transaction_states": [{
        "error_code": 0, "transactional_id": "payments-1", "transaction_state": "Empty",
        "transaction_timeout": 60_000, "transaction_start_time": start, "producer_id": 7, "producer_epoch": 0,
        "topics": [{"topic": "orders", "partitions": [0, 1]}]}]})
    frame = encode_response(3, answer)
    written = -1 if expected is None else start
    assert (60_000).to_bytes(4, "big") + written.to_bytes(8, "big", signed=True) in frame  # timeout, start time
    _, decoded = decode_response(frame[4:], response_class(65, 0))
    (state,) = decoded.transaction_states
    assert state.transaction_start_time == expected
    assert (state.producer_id, state.topics[0].partitions) == (7, (0, 1))
