"""What can go wrong between the first byte of a frame and a decoded request.

Every error the wire layer raises is a :class:`ProtocolError`; nothing else escapes it
(a hypothesis test feeds random bytes to hold us to that). There are two families, and
the difference is what the broker can still do:

``FrameError``
    The byte stream itself is broken: a negative or oversized size prefix. The frame
    boundary is lost, so nothing that follows can be trusted and there is no
    correlation id to answer. Log one line and close the connection.

``RequestError``
    The frame is intact but its request is not one we can serve. It carries whatever
    the header yielded before things went wrong (correlation id, api key, api version,
    client id) and the Kafka ``error_code`` to put on the wire. Apache Kafka itself
    closes the connection for all of these *except* an ApiVersions request of an
    unsupported version, which it answers (v0 body, UNSUPPORTED_VERSION) so the client
    can downgrade; see :func:`pulllog.net.api_versions.api_versions_response`.

    - :class:`UnknownApiKeyError`: an api key the broker does not implement.
    - :class:`UnsupportedVersionError`: a known api key at a version outside the
      broker's range.
    - :class:`InvalidRequestError`: the header or body does not decode.
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

from .apis import api_name

__all__ = [
    "FrameError",
    "FrameTooLargeError",
    "InvalidRequestError",
    "NegativeFrameSizeError",
    "ProtocolError",
    "RequestError",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "api_name",
]


class ProtocolError(Exception):
    """The peer broke the Kafka wire protocol. Base of every error raised by ``net``."""


class FrameError(ProtocolError):
    """The size prefix is unusable: frame boundaries are lost, close the connection."""

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class NegativeFrameSizeError(FrameError):
    """A size prefix below zero: not a Kafka client, or a corrupted stream."""


class FrameTooLargeError(FrameError):
    """A size prefix above ``socket.request.max.bytes``."""

    def __init__(self, message: str, *, size: int, max_size: int) -> None:
        super().__init__(message, size=size)
        self.max_size = max_size


class RequestError(ProtocolError):
    """A whole frame whose request cannot be served; fields hold what the header gave."""

    error_code: ClassVar[ErrorCode] = ErrorCode.invalid_request

    def __init__(
        self,
        message: str,
        *,
        correlation_id: int | None = None,
        api_key: int | None = None,
        api_version: int | None = None,
        client_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id


class UnknownApiKeyError(RequestError):
    """An api key this broker does not implement (Kafka closes the connection)."""

    error_code = ErrorCode.invalid_request


class UnsupportedVersionError(RequestError):
    """A known api key at a version outside ``[min_version, max_version]``."""

    error_code = ErrorCode.unsupported_version

    def __init__(
        self,
        message: str,
        *,
        correlation_id: int,
        api_key: int,
        api_version: int,
        client_id: str | None = None,
        min_version: int,
        max_version: int,
    ) -> None:
        super().__init__(
            message,
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
            client_id=client_id,
        )
        self.min_version = min_version
        self.max_version = max_version


class InvalidRequestError(RequestError):
    """The request header or body does not decode (truncated, bad lengths, bad UTF-8)."""

    error_code = ErrorCode.invalid_request
