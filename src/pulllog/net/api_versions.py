"""The ApiVersions answer: what this broker speaks, built from one table.

The table (api_key -> (min_version, max_version)) is the same one the
:class:`~pulllog.net.protocol.RequestDecoder` enforces, so what we advertise cannot
drift from what we decode.

Rules:

- A request version inside our ApiVersions range gets a response of that version,
  error NONE, every api key sorted by key.
- A request version outside it (a newer client, KIP-511) gets a **v0** body with
  UNSUPPORTED_VERSION and the same api list, so the client can read our ApiVersions
  range and retry at a version we speak. (Apache Kafka lists only ApiVersions itself in
  this answer; the full list is a superset clients handle the same way.) Like every
  ApiVersions response it goes out with response header v0.
- v3+ bodies carry **no tagged fields**: librdkafka 2.0.2 (kcat) fails on a v3 response
  that carries the optional SupportedFeatures / FinalizedFeaturesEpoch /
  FinalizedFeatures / ZkMigrationReady tags, even at their default values. kio's writer
  omits a tagged field whose value equals the field's default *exactly* (``() == []``
  is false), so every tagged field here is left at kio's own default, and a test pins
  the bytes.
"""

from __future__ import annotations

import datetime
from functools import cache
from types import ModuleType

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta
from kio.static.protocol import ResponsePayload

from .protocol import API_VERSIONS, SupportedApis

__all__ = ["api_versions_response"]


@cache
def _response_module(version: int) -> ModuleType:
    return load_payload_module(API_VERSIONS, version, EntityType.response)


def api_versions_response(
    request_version: int,
    supported: SupportedApis,
    *,
    throttle_time_ms: int = 0,
) -> ResponsePayload:
    """The ApiVersionsResponse entity to send for an ApiVersions request of
    ``request_version``; encode it with :func:`~pulllog.net.protocol.encode_response`."""
    if API_VERSIONS not in supported:
        raise ValueError("the supported-api table must include ApiVersions (api key 18)")
    min_version, max_version = supported[API_VERSIONS]
    if min_version <= request_version <= max_version:
        version, error = request_version, ErrorCode.none
    else:
        version, error = 0, ErrorCode.unsupported_version
    module = _response_module(version)
    api_keys = tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in sorted(supported.items())
    )
    if version == 0:  # v0 has no throttle time
        return module.ApiVersionsResponse(error_code=error, api_keys=api_keys)  # type: ignore[no-any-return]
    throttle = i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_time_ms))
    return module.ApiVersionsResponse(  # type: ignore[no-any-return]
        error_code=error, api_keys=api_keys, throttle_time=throttle
    )
