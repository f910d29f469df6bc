"""A broker's own requests to another broker: one request and its answer on asyncio streams.

The replica fetcher (Fetch, OffsetForLeaderEpoch) and the transaction marker sender
(WriteTxnMarkers) talk to other brokers with net/'s codec; the broker never imports the client
package. Each caller keeps its own connection policy (the fetcher one long-lived connection per
leader, the marker sender one per request); the exchange itself and the lookup of a broker's
address are the same for both, and live here.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from ..net.apis import ApiKey
from ..net.build import build, request_class, response_class
from ..net.protocol import decode_response, encode_request

__all__ = ["exchange", "registered_address"]

_SIZE = struct.Struct(">i")


def registered_address(cluster_view: Any, broker_id: int) -> tuple[str, int] | None:
    """The host and port ``broker_id`` registered in ZooKeeper, as this broker's view holds it."""
    for registration in getattr(cluster_view, "brokers", ()):
        if registration.broker_id == broker_id:
            return registration.host, registration.port
    return None


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: ApiKey, version: int,
                   data: dict[str, Any], *, correlation_id: int, client_id: str) -> Any:
    """Send one request and read its answer. An answer to another request (a correlation id
    that does not match) raises ValueError: the connection is out of step and must be closed."""
    writer.write(encode_request(build(request_class(api, version), data), correlation_id=correlation_id,
                                client_id=client_id))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    answered, response = decode_response(await reader.readexactly(size), response_class(api, version))
    if answered != correlation_id:
        raise ValueError(f"response {answered} to request {correlation_id}")
    return response
