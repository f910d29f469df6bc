"""Requests real librdkafka builds send that do not quite match Kafka's schemas."""

from __future__ import annotations

import pytest

from pulllog.net import RequestDecoder
from pulllog.net.errors import InvalidRequestError

METADATA = {3: (0, 12)}

# confluent-kafka 2.16 AdminClient.list_topics(), captured: Metadata v12, correlation id 3,
# client id "rdkafka", then a body whose null topics array takes 4 zero bytes instead of
# one (confluentinc/librdkafka#5049): 00 000000 | allow_auto 01 | topic_auth 00 | tags 00.
LIST_ALL_TOPICS_V12 = bytes.fromhex("0003000c00000003000772646b61666b61" "00" "00000000" "01" "00" "00")


def test_padded_null_topics_array_reads_as_all_topics() -> None:
    request = RequestDecoder(METADATA).decode(LIST_ALL_TOPICS_V12)

    assert (request.api_version, request.correlation_id, request.client_id) == (12, 3, "rdkafka")
    assert request.body.topics is None
    assert request.body.include_topic_authorized_operations is False


def test_well_formed_all_topics_request_is_read_as_is() -> None:
    frame = bytes.fromhex("0003000c00000004000772646b61666b61" "00" "00" "01" "00" "00")

    request = RequestDecoder(METADATA).decode(frame)

    assert request.body.topics is None and request.body.allow_auto_topic_creation is True


def test_other_trailing_bytes_are_still_refused() -> None:
    frame = bytes.fromhex("0003000c00000005000772646b61666b61" "00" "00000000" "01" "00")

    with pytest.raises(InvalidRequestError, match="unexpected bytes after the body"):
        RequestDecoder(METADATA).decode(frame)
