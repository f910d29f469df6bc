"""Kafka request and response messages: header rules, then the body through kio.

A request frame (after the size prefix, see :mod:`pulllog.net.framing`)::

    request header v0:  api_key int16, api_version int16, correlation_id int32
    request header v1:  v0 + client_id nullable string (int16 length, -1 = null)
    request header v2:  v1 + tag buffer (uvarint count, then tag/size/bytes each)
    body:               the request schema of (api_key, api_version)

A response frame::

    response header v0: correlation_id int32
    response header v1: v0 + tag buffer (always empty here: one 0x00 byte)
    body:               the response schema of (api_key, api_version)

Rules:

- The header version is not on the wire; it follows from (api_key, api_version):
  flexible versions use request header v2 / response header v1, the rest v1 / v0.
  kio records it per class (``__header_schema__``). Request header v0 only ever
  served ControlledShutdown v0, which neither Kafka 4 nor kio has; we parse it anyway.
- ``client_id`` stays a *legacy* int16-length string even in header v2 (Kafka keeps it
  so a broker can read the client id of any request, whatever its version).
- ApiVersions responses always use response header v0, whatever the version (KIP-511):
  a client that does not yet know what the broker speaks must be able to read the
  answer. This holds for the v0 error answer to an unsupported ApiVersions version too.
- The first 8 bytes (api key, version, correlation id) have the same layout in every
  header version, so even a request we refuse yields a correlation id to answer with.
- The order of checks decides the error: unknown api key, then unsupported version,
  then a header or body that does not decode (see :mod:`pulllog.net.errors`).

Hot path: a batch-1 producer sends one small Produce per record, so everything that
depends only on (api_key, api_version) -- the kio class, its reader, the structural
check (:mod:`pulllog.net.guard`) and the header version -- is resolved once, when the
:class:`RequestDecoder` first meets that version (not at start: importing kio's ~270
schema modules for every version served would take most of a broker's start-up time);
decoding a request is one dict lookup, a hand-written
header parse, the structural check, and kio's native reader. Produce, the one request a
producer sends per batch, skips both: its body is decoded by hand in one bounds-checked
pass (:func:`pulllog.net.produce.decode_produce_request`), into named tuples with kio's
field names. On the client side, Produce requests are encoded by hand too, byte for byte
what kio writes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, NamedTuple, TypeVar, cast

from kio.index import load_request_schema as _kio_request_schema
from kio.index import load_response_schema as _kio_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from .apis import ApiKey
from .errors import (
    InvalidRequestError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    api_name,
)
from .guard import MalformedError, body_skipper, skip_tag_buffer
from .produce import IMPLEMENTATION as PRODUCE_IMPLEMENTATION
from .produce import (
    PRODUCE_MAX_VERSION,
    PRODUCE_MIN_VERSION,
    PartitionProduceData,
    ProduceRequestData,
    TopicProduceData,
    decode_produce_request,
    encode_produce_request,
)

__all__ = [
    "API_VERSIONS",
    "InvalidResponseError",
    "Request",
    "RequestDecoder",
    "RequestHeader",
    "SupportedApis",
    "decode_response",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "request_header_version",
    "response_header_version",
]

API_VERSIONS: Final = int(ApiKey.API_VERSIONS)

SupportedApis = Mapping[int, tuple[int, int]]
"""api_key -> (min_version, max_version), inclusive: what the broker serves."""

_FIXED_HEADER: Final = struct.Struct(">hhi")
_PRODUCE: Final = int(ApiKey.PRODUCE)
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_METADATA: Final = int(ApiKey.METADATA)

R = TypeVar("R", bound=ResponsePayload)

_CONTROLLED_SHUTDOWN: Final = 7  # the one API whose schemas are pulllog's own (kio has none)


def load_request_schema(api_key: int, api_version: int) -> Any:
    """kio's request class, or pulllog's for ControlledShutdown (:mod:`.controlled_shutdown`)."""
    if api_key == _CONTROLLED_SHUTDOWN:
        return _own_schema(api_key, api_version, EntityType.request)
    return _kio_request_schema(api_key, api_version)


def load_response_schema(api_key: int, api_version: int) -> Any:
    """kio's response class, or pulllog's for ControlledShutdown."""
    if api_key == _CONTROLLED_SHUTDOWN:
        return _own_schema(api_key, api_version, EntityType.response)
    return _kio_response_schema(api_key, api_version)


def _own_schema(api_key: int, api_version: int, entity_type: EntityType) -> Any:
    from .controlled_shutdown import own_schema  # imported with the API's first use

    found = own_schema(api_key, api_version, entity_type)
    if found is None:
        raise LookupError(f"{api_name(api_key)} v{api_version} has no {entity_type.name} schema")
    return found


def _has_schemas(api_key: int, version: int) -> bool:
    if api_key == _CONTROLLED_SHUTDOWN:
        from .controlled_shutdown import own_schema

        return all(own_schema(api_key, version, t) is not None for t in (EntityType.request, EntityType.response))
    entities = schema_name_map.get(api_key_map.get(api_key, ""), {}).get(version, {})
    return EntityType.request in entities and EntityType.response in entities


class InvalidResponseError(ProtocolError):
    """A response frame that does not decode (client side)."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class Request(NamedTuple):
    """One decoded request: header fields plus the body (a kio entity; Produce: see
    :class:`pulllog.net.produce.ProduceRequestData`). A named tuple: one is built per
    request, and a tuple costs a third of a frozen dataclass."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: RequestPayload


_new_request = tuple.__new__

# A Produce request in the common shape is decoded in C when the extension is built
# (pulllog/net/_cproduce.c): the same Request it would be here, or None, and then the Python
# code below decodes it (or refuses it with its own error).
_c_decode_produce: Callable[[bytes, int, int], Request | None] | None = None
if PRODUCE_IMPLEMENTATION == "c":
    from ._cproduce import bind_decoder, decode_request  # type: ignore[import-untyped]

    bind_decoder(Request, ProduceRequestData, TopicProduceData, PartitionProduceData)
    _c_decode_produce = decode_request


def request_header_version(api_key: int, api_version: int) -> int:
    """1 or 2 for every request kio knows (see module docstring)."""
    return int(load_request_schema(api_key, api_version).__header_schema__.__version__)


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1; always 0 for ApiVersions (KIP-511)."""
    if api_key == API_VERSIONS:
        return 0
    return int(load_response_schema(api_key, api_version).__header_schema__.__version__)


def parse_request_header(frame: bytes, header_version: int) -> tuple[RequestHeader, int]:
    """Parse a request header -> (header, offset of the body).

    Raises :class:`InvalidRequestError`, carrying the correlation id once the first
    8 bytes are there.
    """
    if len(frame) < 8:
        raise InvalidRequestError(
            f"request of {len(frame)} bytes is shorter than the 8-byte header start; "
            "closing the connection"
        )
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    client_id, position = _header_tail(frame, header_version, api_key, api_version, correlation_id)
    return RequestHeader(api_key, api_version, correlation_id, client_id), position


def _header_tail(
    frame: bytes, header_version: int, api_key: int, api_version: int, correlation_id: int
) -> tuple[str | None, int]:
    """client_id and the offset of the body, after the 8 fixed bytes."""
    if header_version == 0:
        return None, 8
    try:
        client_id, position = _read_client_id(frame)
        if header_version >= 2:
            if position < len(frame) and frame[position] == 0:  # no tagged fields: the usual
                position += 1
            else:
                position = skip_tag_buffer(frame, position, len(frame))
    except (MalformedError, UnicodeDecodeError) as error:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{api_version} request header does not decode: {error}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        ) from None
    return client_id, position


def _read_client_id(frame: bytes) -> tuple[str | None, int]:
    end = len(frame)
    if end < 10:
        raise MalformedError("client_id length at byte 8 needs 2 bytes")
    (length,) = _INT16.unpack_from(frame, 8)
    if length < 0:
        if length == -1:
            return None, 10
        raise MalformedError(f"negative client_id length {length}")
    if 10 + length > end:
        raise MalformedError(f"client_id of {length} bytes runs past the end of the frame")
    return frame[10 : 10 + length].decode(), 10 + length


def _best_effort_client_id(frame: bytes) -> str | None:
    """For log lines about requests we refuse before knowing their header version."""
    try:
        return _read_client_id(frame)[0]
    except (MalformedError, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class _RequestCodec:
    header_version: int
    read_body: Callable[[bytes, int], Any]
    """``(frame, body position) -> body``; raises on a body that does not decode."""


def _kio_body_reader(request_type: type[Any]) -> Callable[[bytes, int], Any]:
    """The structural check (see guard: it keeps kio from aborting), then kio's reader."""
    check_body = body_skipper(request_type)
    read = entity_reader(request_type)

    def read_body(frame: bytes, position: int) -> Any:
        rewritten = check_body(frame, position)
        if rewritten is None:
            return read(frame, position)[0]
        return read(rewritten, 0)[0]  # unknown tagged fields were cut out (see guard)

    return read_body


def _produce_body_reader(version: int) -> Callable[[bytes, int], Any]:
    def read_body(frame: bytes, position: int) -> Any:
        return decode_produce_request(frame, position, version)

    return read_body


class RequestDecoder:
    """Decodes whole request frames for the api versions a broker serves.

    ``supported`` maps api key -> (min_version, max_version); every version in every
    range must exist in kio (checked here against kio's index, so a typo fails at startup,
    not per request). A version's codec is built the first time a request of it arrives.
    """

    __slots__ = ("_codecs", "_produce_max", "_produce_min", "supported")

    def __init__(self, supported: SupportedApis) -> None:
        self.supported: dict[int, tuple[int, int]] = dict(supported)
        self._codecs: dict[tuple[int, int], _RequestCodec] = {}
        # the Produce versions the C decoder may take (none when Produce is not served)
        produce = self.supported.get(_PRODUCE, (1, 0))
        self._produce_min = max(produce[0], PRODUCE_MIN_VERSION)
        self._produce_max = min(produce[1], PRODUCE_MAX_VERSION)
        for api_key, (min_version, max_version) in self.supported.items():
            if not 0 <= min_version <= max_version:
                raise ValueError(
                    f"{api_name(api_key)}: bad version range v{min_version}-v{max_version}"
                )
            for version in range(min_version, max_version + 1):
                if not _has_schemas(api_key, version):
                    raise ValueError(f"{api_name(api_key)} v{version} is advertised but kio has no schema for it")

    def _codec(self, api_key: int, api_version: int) -> _RequestCodec | None:
        """The codec of a served version, built on its first request; None if not served."""
        versions = self.supported.get(api_key)
        if versions is None or not versions[0] <= api_version <= versions[1]:
            return None
        request_type = load_request_schema(api_key, api_version)
        by_hand = api_key == _PRODUCE and PRODUCE_MIN_VERSION <= api_version <= PRODUCE_MAX_VERSION
        codec = self._codecs[(api_key, api_version)] = _RequestCodec(
            header_version=int(request_type.__header_schema__.__version__),
            read_body=_produce_body_reader(api_version) if by_hand else _kio_body_reader(request_type),
        )
        return codec

    def decode(self, frame: bytes | bytearray | memoryview) -> Request:
        """One frame (size prefix already stripped) -> :class:`Request`.

        Raises :class:`UnknownApiKeyError`, :class:`UnsupportedVersionError` or
        :class:`InvalidRequestError`; never anything else.
        """
        if _c_decode_produce is not None and (type(frame) is bytes or type(frame) is memoryview):
            # (a memoryview: a frame still in the broker connection's read buffer, read in place)
            request = _c_decode_produce(frame, self._produce_min, self._produce_max)
            if request is not None:
                return request
        if type(frame) is not bytes:  # kio's reader takes read-only buffers only
            frame = bytes(frame)
        if len(frame) < 8:
            raise InvalidRequestError(
                f"request of {len(frame)} bytes is shorter than the 8-byte header start; "
                "closing the connection"
            )
        api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
        codec = self._codecs.get((api_key, api_version)) or self._codec(api_key, api_version)
        if codec is None:
            raise self._refusal(frame, api_key, api_version, correlation_id)
        client_id, position = _header_tail(frame, codec.header_version, api_key, api_version, correlation_id)
        if api_key == _METADATA and api_version >= 9:
            frame = _undo_librdkafka_null_topics(frame, position, api_version)
        try:
            body = codec.read_body(frame, position)
        except Exception as error:
            # The structural check rules out what could crash kio; what is left
            # (bad UTF-8, a null where none is allowed, ...) surfaces as assorted
            # kio exceptions. For a pure decoder any failure means a bad request.
            raise InvalidRequestError(
                f"{api_name(api_key)} v{api_version} request body does not decode: {error}",
                correlation_id=correlation_id,
                api_key=api_key,
                api_version=api_version,
                client_id=client_id,
            ) from None
        return _new_request(Request, (api_key, api_version, correlation_id, client_id, body))

    def _refusal(
        self, frame: bytes, api_key: int, api_version: int, correlation_id: int
    ) -> UnknownApiKeyError | UnsupportedVersionError:
        client_id = _best_effort_client_id(frame)
        versions = self.supported.get(api_key)
        if versions is None:
            return UnknownApiKeyError(
                f"{api_name(api_key)} (api key {api_key}) v{api_version} is not served "
                f"by this broker (client {client_id!r}); closing the connection",
                correlation_id=correlation_id,
                api_key=api_key,
                api_version=api_version,
                client_id=client_id,
            )
        min_version, max_version = versions
        return UnsupportedVersionError(
            f"{api_name(api_key)} v{api_version} is not supported (this broker serves "
            f"v{min_version}-v{max_version}); client {client_id!r} should pick a version "
            "from ApiVersions",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
            client_id=client_id,
            min_version=min_version,
            max_version=max_version,
        )


def _undo_librdkafka_null_topics(frame: bytes, position: int, api_version: int) -> bytes:
    """librdkafka (2.x, at least through 2.16) writes the null topics array of a Metadata
    v9+ "all topics" request as 4 zero bytes: the int32 slot it reserves for the count is
    never shrunk to the 1-byte compact varint (confluentinc/librdkafka#5049). Apache Kafka
    gets away with it because it ignores trailing bytes. A well-formed body starting with 4
    zero bytes (a null array, false booleans, and from v11 an empty tag buffer) is 4 bytes
    long in v11+, 5 in v9-v10 (no Metadata request defines tagged fields), so one exactly 3
    bytes longer is this encoding: drop the padding. librdkafka 2.16 speaks v12 to us."""
    fixed = 4 if api_version >= 11 else 5
    if len(frame) - position == fixed + 3 and frame.startswith(b"\x00\x00\x00\x00", position):
        return frame[: position + 1] + frame[position + 4 :]
    return frame


@cache
def _response_encoding(response_type: type[Any]) -> tuple[bytes, Callable[[Any, Any], None]]:
    """(header suffix after the correlation id, kio writer) for one response class."""
    header_version = response_header_version(response_type.__api_key__, response_type.__version__)
    return (b"\x00" if header_version >= 1 else b""), entity_writer(response_type)


def encode_response(correlation_id: int, body: ResponsePayload) -> bytes:
    """Size prefix + response header + body: the bytes to write back.

    The version is the body's kio class (``FetchResponse`` of ``kio.schema.fetch.v12``
    is Fetch v12); the header version follows from it.
    """
    header_tail, write = _response_encoding(type(body))
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")  # size, patched below
    buffer.write(_INT32.pack(correlation_id))
    buffer.write(header_tail)
    write(buffer, body)
    view = buffer.getbuffer()
    _INT32.pack_into(view, 0, len(view) - 4)
    view.release()
    return buffer.getvalue()


@cache
def _request_encoding(request_type: type) -> tuple[int, Callable[[Any, Any], None]]:
    header_version = int(request_type.__header_schema__.__version__)  # type: ignore[attr-defined]
    return header_version, entity_writer(request_type)


@cache
def _encoded_by_hand(request_type: type) -> int | None:
    """The version of a request class encoded by hand (Produce, a producer's most frequent
    request), else None. Resolved per class on first use: loading kio's Produce classes at
    import would cost every process that imports this module (the broker's start-up)."""
    version = getattr(request_type, "__version__", None)
    if getattr(request_type, "__api_key__", None) != _PRODUCE or version is None:
        return None
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        return None
    return int(version) if load_request_schema(_PRODUCE, version) is request_type else None


def encode_request(body: RequestPayload, *, correlation_id: int, client_id: str | None) -> bytes:
    """Client side: size prefix + request header + body."""
    version = _encoded_by_hand(type(body))
    if version is not None:
        return encode_produce_request(body, version, correlation_id, client_id)
    header_version, write = _request_encoding(type(body))
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    buffer.write(_FIXED_HEADER.pack(body.__api_key__, body.__version__, correlation_id))
    if header_version >= 1:
        if client_id is None:
            buffer.write(_INT16.pack(-1))
        else:
            encoded = client_id.encode()
            buffer.write(_INT16.pack(len(encoded)))
            buffer.write(encoded)
    if header_version >= 2:
        buffer.write(b"\x00")  # no tagged header fields
    write(buffer, body)
    view = buffer.getbuffer()
    _INT32.pack_into(view, 0, len(view) - 4)
    view.release()
    return buffer.getvalue()


@cache
def _response_decoding(
    response_type: type[Any],
) -> tuple[int, Callable[[bytes, int], bytes | None], Callable[[bytes, int], tuple[Any, int]]]:
    header_version = response_header_version(response_type.__api_key__, response_type.__version__)
    return header_version, body_skipper(response_type), entity_reader(response_type)


def decode_response(frame: bytes | bytearray | memoryview, response_type: type[R]) -> tuple[int, R]:
    """Client side: one response frame (prefix stripped) -> (correlation id, body).

    An ApiVersions error answer is always a v0 body: decode it with v0's class when
    the error code (the first two body bytes) is not 0.
    """
    header_version, check_body, read_body = _response_decoding(cast(type, response_type))
    if type(frame) is not bytes:  # kio's reader takes read-only buffers only
        frame = bytes(frame)
    try:
        if len(frame) < 4:
            raise MalformedError(f"response of {len(frame)} bytes has no correlation id")
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        position = 4 if header_version == 0 else skip_tag_buffer(frame, 4, len(frame))
        rewritten = check_body(frame, position)
        if rewritten is None:
            body, _ = read_body(frame, position)
        else:
            body, _ = read_body(rewritten, 0)
    except Exception as error:
        raise InvalidResponseError(
            f"{response_type.__name__} v{response_type.__version__} does not decode: {error}"
        ) from None
    return correlation_id, body
