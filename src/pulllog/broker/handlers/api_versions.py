"""ApiVersions (18): derived from the handler registry, so it advertises what is implemented.

One deliberate exception, the one Kafka 4 makes (KAFKA-18659): Produce is advertised from
v0 although only v3+ is served. librdkafka before the fix for confluentinc/librdkafka#4956
(Debian's kcat 1.7 on librdkafka 2.0.2, for one) sends gzip, snappy and lz4 batches
uncompressed unless the broker lists Produce v0, yet never sends v0 to a broker whose
range reaches v3. A client that does send Produce v0-v2 is still refused by the decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...net.api_versions import api_versions_response
from . import RequestContext, handler

if TYPE_CHECKING:
    from ..broker import Broker


PRODUCE = 0


def advertised_versions(supported: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The api table ApiVersions answers with: ``supported``, with Produce from v0."""
    advertised = dict(supported)
    if PRODUCE in advertised:
        advertised[PRODUCE] = (0, advertised[PRODUCE][1])
    return advertised


@handler(18, "ApiVersions", 0, 4)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    return api_versions_response(ctx.version, advertised_versions(broker.supported_apis))
