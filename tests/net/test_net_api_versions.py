"""ApiVersions: the answer clients (kcat/librdkafka 2.0.2, Java, kafka-python) start from."""

from __future__ import annotations

import io
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsResponse as KafkaPythonApiVersionsResponse
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16

from pulllog.net import (
    RequestDecoder,
    UnsupportedVersionError,
    api_versions_response,
    decode_response,
    encode_response,
)

SMALL = {18: (0, 3)}
SUPPORTED = {0: (3, 9), 1: (4, 12), 3: (0, 12), 18: (0, 3)}


def test_v3_response_bytes_carry_no_tagged_fields() -> None:
    # librdkafka 2.0.2 (kcat) fails on a v3 response carrying the optional feature
    # tags even at their defaults; the top-level tag buffer must be a single 0x00.
    data = encode_response(7, api_versions_response(3, SMALL))
    assert data == bytes.fromhex(
        "00000013"  # size: 19 bytes follow
        "00000007"  # response header v0: correlation id only (KIP-511)
        "0000"  # error_code NONE
        "02"  # api_keys: compact array of 1
        "0012"
        "0000"
        "0003"
        "00"  # ApiVersions v0-v3, empty tag buffer
        "00000000"  # throttle_time_ms
        "00"  # tagged fields: none
    )


def test_kio_omits_tagged_fields_only_when_they_equal_the_default_exactly() -> None:
    # What we rely on, pinned: defaults -> no tags. The trap: () and [] compare unequal,
    # so an empty *list* of supported features would be written as a tagged field.
    api_keys = (ApiVersionV3(api_key=i16(18), min_version=i16(0), max_version=i16(3)),)
    defaults = api_versions_response(3, SMALL)
    assert isinstance(defaults, ApiVersionsResponseV3)
    assert (defaults.supported_features, defaults.finalized_features_epoch) == ((), -1)
    assert (defaults.finalized_features, defaults.zk_migration_ready) == ((), False)
    with_list = ApiVersionsResponseV3(
        error_code=ErrorCode.none,
        api_keys=api_keys,
        throttle_time=defaults.throttle_time,
        supported_features=[],  # type: ignore[arg-type]
    )
    buffer = io.BytesIO()
    entity_writer(ApiVersionsResponseV3)(buffer, with_list)
    assert buffer.getvalue().endswith(b"\x01\x00\x01\x01")  # 1 tag: tag 0, 1 byte, []


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_supported_version_answers_in_kind(version: int) -> None:
    body = api_versions_response(version, SUPPORTED)
    assert body.__version__ == version
    assert body.error_code is ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (0, 3, 9),
        (1, 4, 12),
        (3, 0, 12),
        (18, 0, 3),
    ]
    data = encode_response(1, body)
    assert decode_response(data[4:], type(body)) == (1, body)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_reads_our_answer(version: int) -> None:
    data = encode_response(5, api_versions_response(version, SUPPORTED))
    decoded = KafkaPythonApiVersionsResponse.decode(data, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 5
    assert decoded.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (0, 3, 9),
        (1, 4, 12),
        (3, 0, 12),
        (18, 0, 3),
    ]


def test_too_new_request_gets_v0_unsupported_version_with_the_api_list() -> None:
    body = api_versions_response(4, SUPPORTED)
    assert isinstance(body, ApiVersionsResponseV0)
    assert body.error_code is ErrorCode.unsupported_version
    assert (18, 0, 3) in [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]
    data = encode_response(6, body)
    # Header v0, then a v0 body: error 35, legacy int32-length array, no throttle field.
    assert data[4:14] == struct.pack(">ihi", 6, 35, 4)
    assert len(data) == 4 + 4 + 2 + 4 + 4 * 6


def test_unsupported_version_flow_from_request_to_answer() -> None:
    # Broker flow: the decoder refuses, the answer is built from the same table.
    frame = struct.pack(">hhih", 18, 7, 99, 3) + b"cli" + b"\x00" + b"\x01?"
    with pytest.raises(UnsupportedVersionError) as caught:
        RequestDecoder(SUPPORTED).decode(frame)
    error = caught.value
    assert error.correlation_id is not None and error.api_version is not None
    data = encode_response(
        error.correlation_id, api_versions_response(error.api_version, SUPPORTED)
    )
    decoded = KafkaPythonApiVersionsResponse.decode(data, version=7, header=True, framed=True)
    assert decoded.header.correlation_id == 99
    assert decoded.error_code == ErrorCode.unsupported_version
    versions = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert versions[18] == (0, 3)  # what the client downgrades to


def test_throttle_time_is_carried_from_v1() -> None:
    body = api_versions_response(1, SMALL, throttle_time_ms=250)
    data = encode_response(1, body)
    assert data[-4:] == struct.pack(">i", 250)


def test_table_without_api_versions_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="api key 18"):
        api_versions_response(3, {1: (4, 12)})
