"""The structural guard in front of kio's reader: compiles for every schema, strips
unknown tags exactly as an encoder without them would have written the body."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32, i32Timedelta, i64

from pulllog.net.guard import MalformedError, body_skipper, entity_skipper


def kio_bytes(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def test_guard_compiles_for_every_kio_request_and_response() -> None:
    compiled = 0
    for api_key, name in api_key_map.items():
        for version, entities in schema_name_map[name].items():
            if EntityType.request in entities:
                entity_skipper(load_request_schema(api_key, version))
                compiled += 1
            if EntityType.response in entities:
                entity_skipper(load_response_schema(api_key, version))
                compiled += 1
    assert compiled > 500


def test_plain_body_is_read_in_place() -> None:
    body = kio_bytes(ApiVersionsRequest(client_software_name="a", client_software_version="b"))
    assert body_skipper(ApiVersionsRequest)(b"HDR" + body, 3) is None


def test_stripped_body_equals_the_encoding_without_the_unknown_tag() -> None:
    entity = ApiVersionsRequest(client_software_name="a", client_software_version="b")
    body = kio_bytes(entity)
    with_unknown = body[:-1] + b"\x02" + b"\x05\x01x" + b"\x09\x00"
    assert body_skipper(ApiVersionsRequest)(with_unknown, 0) == body


def test_nested_strip_shrinks_the_enclosing_tag_size() -> None:
    entity = fetch_v15.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
        min_bytes=i32(1),
        topics=(),
        forgotten_topics_data=(),
        replica_state=fetch_v15.ReplicaState(replica_id=i32(3), replica_epoch=i64(7)),
    )
    expected = kio_bytes(entity)
    plain_state = struct.pack(">iq", 3, 7) + b"\x00"
    assert expected.endswith(b"\x01\x01" + bytes([len(plain_state)]) + plain_state)
    # 200 bytes of unknown tag: its size needs a 2-byte uvarint, so both the inner tag
    # count and the enclosing size change width when it is cut out.
    unknown = b"\x63" + b"\xc8\x01" + b"u" * 200
    state = struct.pack(">iq", 3, 7) + b"\x01" + unknown
    size = len(state)
    tags = b"\x01\x01" + bytes([(size & 0x7F) | 0x80, size >> 7]) + state
    mangled = expected[: -len(plain_state) - 3] + tags
    assert body_skipper(fetch_v15.FetchRequest)(mangled, 0) == expected


@pytest.mark.parametrize("varint", [b"\x80", b"\xff\xff\xff\xff\xff\x01"])
def test_a_truncated_or_too_long_varint_is_a_malformed_body(varint: bytes) -> None:
    # records.varint reads it (tests/records/test_varint.py); the guard reports net's error
    with pytest.raises(MalformedError, match="varint at byte 0"):
        body_skipper(ApiVersionsRequest)(varint, 0)
