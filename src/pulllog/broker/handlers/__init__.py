"""One module per Kafka API, each registering its handler and the versions it serves.

A newcomer finds the Fetch code in ``fetch.py``. ApiVersions is derived from this registry,
so what the broker advertises cannot drift from what it implements.

A handler is an ``async def`` when it may wait (long polls, rebalances), or a plain ``def``
when it never does (Produce: validate, append, answer). The server runs a plain one right
where the request's bytes arrive, without waking the connection's task: for a producer
that sends one request at a time, that task switch is a large part of the request's cost.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ...net.protocol import Request
    from ..broker import Broker

__all__ = ["Handler", "RequestContext", "handler", "registry"]


class RequestContext(NamedTuple):
    """What a handler gets: the request and who sent it (one per request, so a tuple)."""

    request: "Request"
    client_host: str
    client_port: int
    connection_id: int

    @property
    def version(self) -> int:
        return self.request.api_version

    @property
    def body(self) -> Any:
        return self.request.body


HandlerFn = Callable[["Broker", RequestContext], Awaitable[Any] | Any]


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    fn: HandlerFn
    waits: bool
    """True for an ``async def`` handler (await its result); False: ``fn`` answers at once."""


_REGISTRY: dict[int, Handler] = {}

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "configs",
    "delete_records",
    "describe_log_dirs",
    "init_producer_id",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
)


def handler(api_key: int, name: str, min_version: int, max_version: int) -> Callable[[HandlerFn], HandlerFn]:
    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in _REGISTRY:
            raise RuntimeError(f"two handlers for api key {api_key}")
        _REGISTRY[api_key] = Handler(api_key, name, min_version, max_version, fn,
                                     waits=inspect.iscoroutinefunction(fn))
        return fn

    return register


def registry() -> dict[int, Handler]:
    """Import every handler module once and return api key -> Handler.

    Every module is imported each time (a no-op once it is in ``sys.modules``): a registry
    that is merely non-empty may hold only the handlers some other import pulled in first.
    """
    for module in _MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return _REGISTRY
