"""The Kafka wire protocol without I/O: bytes in, requests out; responses in, bytes out.

Nothing in this package touches a socket, a file or an event loop (sans-I/O, like
h11 and wsproto); the asyncio server and the client are thin shells around it.

- :mod:`.framing`: size-prefixed frames out of a byte stream.
- :mod:`.protocol`: request headers and bodies (through kio), response encoding.
- :mod:`.api_versions`: the ApiVersions answer from the table of served versions.
- :mod:`.fetch`: Fetch responses as bytes plus :class:`FileSlice` placeholders.
- :mod:`.guard`: the structural check that keeps hostile bodies away from kio.
- :mod:`.coordinator_keys`: which partition of ``__consumer_offsets`` or
  ``__transaction_state`` holds a group id or a transactional id (Kafka's hash rule).
- :mod:`.errors`: :class:`ProtocolError` and its subclasses, the only exceptions raised
  for bad input.
"""

from .api_versions import api_versions_response
from .errors import (
    FrameError,
    FrameTooLargeError,
    InvalidRequestError,
    NegativeFrameSizeError,
    ProtocolError,
    RequestError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from .fetch import (
    FETCH_MAX_VERSION,
    FETCH_MIN_VERSION,
    AbortedTransaction,
    Chunk,
    FetchPartitionResponse,
    FetchResponseData,
    FetchTopicResponse,
    FileSlice,
    encode_fetch_response,
    materialize,
    wire_size,
)
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, frame
from .protocol import (
    API_VERSIONS,
    InvalidResponseError,
    Request,
    RequestDecoder,
    RequestHeader,
    SupportedApis,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_header_version,
    response_header_version,
)

__all__ = [
    "API_VERSIONS",
    "DEFAULT_MAX_FRAME_SIZE",
    "FETCH_MAX_VERSION",
    "FETCH_MIN_VERSION",
    "AbortedTransaction",
    "Chunk",
    "FetchPartitionResponse",
    "FetchResponseData",
    "FetchTopicResponse",
    "FileSlice",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "InvalidRequestError",
    "InvalidResponseError",
    "NegativeFrameSizeError",
    "ProtocolError",
    "Request",
    "RequestDecoder",
    "RequestError",
    "RequestHeader",
    "SupportedApis",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "api_versions_response",
    "decode_response",
    "encode_fetch_response",
    "encode_request",
    "encode_response",
    "frame",
    "materialize",
    "parse_request_header",
    "request_header_version",
    "response_header_version",
    "wire_size",
]
