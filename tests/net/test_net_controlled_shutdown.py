"""ControlledShutdown (7) v1-v3: pulllog's own schemas (kio has none), byte for byte Kafka's
ControlledShutdownRequest/Response.json, through the same decoder and builders as every API."""

from __future__ import annotations

import struct

import pytest

from pulllog.net.apis import ApiKey
from pulllog.net.build import build, request_class, response_class
from pulllog.net.protocol import RequestDecoder, decode_response, encode_request, encode_response


def test_a_v3_request_is_kafkas_flexible_layout() -> None:
    request = build(request_class(ApiKey.CONTROLLED_SHUTDOWN, 3), {"broker_id": 2, "broker_epoch": 4294967296})
    frame = encode_request(request, correlation_id=9, client_id="b")
    # size, api key 7, version 3, correlation id, client id "b", empty header tags,
    # broker_id int32, broker_epoch int64, empty body tags
    body = struct.pack(">hhih", 7, 3, 9, 1) + b"b" + b"\x00" + struct.pack(">iq", 2, 4294967296) + b"\x00"
    assert frame == struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_served_version_round_trips(version: int) -> None:
    request = build(request_class(ApiKey.CONTROLLED_SHUTDOWN, version), {"broker_id": 3, "broker_epoch": 77})
    decoded = RequestDecoder({7: (1, 3)}).decode(encode_request(request, correlation_id=1, client_id=None)[4:])
    assert (decoded.api_key, decoded.api_version, int(decoded.body.broker_id)) == (7, version, 3)
    assert int(getattr(decoded.body, "broker_epoch", 77)) == 77  # v1 has none
    response = build(response_class(ApiKey.CONTROLLED_SHUTDOWN, version), {
        "error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 4}]})
    correlation_id, answer = decode_response(encode_response(1, response)[4:],
                                             response_class(ApiKey.CONTROLLED_SHUTDOWN, version))
    assert correlation_id == 1
    assert [(p.topic_name, p.partition_index) for p in answer.remaining_partitions] == [("t", 4)]


def test_a_v1_response_is_kafkas_layout() -> None:
    response = build(response_class(ApiKey.CONTROLLED_SHUTDOWN, 1), {
        "error_code": 41, "remaining_partitions": [{"topic_name": "ab", "partition_index": 1}]})
    body = struct.pack(">ihi", 5, 41, 1) + struct.pack(">h", 2) + b"ab" + struct.pack(">i", 1)
    assert encode_response(5, response) == struct.pack(">i", len(body)) + body
