"""ApiVersions (18): the served-versions table of the handler registry (checked against the
handlers by a test), so it advertises what is implemented.

Two rules of this API live here, not in the server:

* A request of a version we do not serve is answered, not refused (KIP-511): a v0 body with
  UNSUPPORTED_VERSION and our api table, so the client can pick a version and retry. The
  server sends it for any handler that declares ``unsupported_version``; this is the only one.
* One deliberate exception in what is advertised, the one Kafka 4 makes (KAFKA-18659):
  Produce is advertised from v0 although only v3+ is served. librdkafka before the fix for
  confluentinc/librdkafka#4956 (Debian's kcat 1.7 on librdkafka 2.0.2, for one) sends gzip,
  snappy and lz4 batches uncompressed unless the broker lists Produce v0, yet never sends v0
  to a broker whose range reaches v3. A client that does send Produce v0-v2 is still refused
  by the decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kio.static.protocol import ResponsePayload

from ...net.api_versions import api_versions_response
from ...net.apis import ApiKey
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..api import BrokerApi


def advertised_versions(supported: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The api table ApiVersions answers with: ``supported``, with Produce from v0."""
    advertised = dict(supported)
    if ApiKey.PRODUCE in advertised:
        advertised[ApiKey.PRODUCE] = (0, advertised[ApiKey.PRODUCE][1])
    return advertised


def unsupported_version(broker: "BrokerApi", version: int) -> ResponsePayload:
    """The answer to an ApiVersions request of a version outside our range: v0, UNSUPPORTED_VERSION."""
    return api_versions_response(version, advertised_versions(broker.supported_apis))


@handler(ApiKey.API_VERSIONS, 0, 4, unsupported_version=unsupported_version)
async def handle(broker: "BrokerApi", ctx: RequestContext) -> ResponsePayload:
    return api_versions_response(ctx.version, advertised_versions(broker.supported_apis))
