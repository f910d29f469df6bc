"""One module per Kafka API, each registering its handler and the versions it serves.

A newcomer finds the Fetch code in ``fetch.py``. ApiVersions advertises the versions of the
:data:`SERVED` table, which names each API's module and versions so that a broker imports a
handler only with its API's first request; each module's ``@handler`` line states the same
versions, and a test checks that the two agree, so what the broker advertises cannot drift
from what it implements. Names come from the one table of APIs, :class:`pulllog.net.apis.ApiKey`.

The boundary: a handler is ``fn(broker, ctx)``, where ``broker`` is the
:class:`~pulllog.broker.api.BrokerApi` interface (never the Broker class) and ``ctx.body`` is
the decoded request (a kio entity; Produce: ``pulllog.net.produce.ProduceRequestData``). It
returns a typed response, or None for no answer at all (Produce with acks=0), and its
record's ``encode`` turns that response into the frame: kio's writer for a kio response
entity (the default), ``encode_produce_response`` for Produce's ``TopicProduceResponse``
list, ``encode_fetch_response`` for Fetch's ``FetchResponseData`` (bytes plus ``FileSlice``
chunks that go out with sendfile). Handlers never encode bytes themselves.

Per-API rules live on the :class:`Handler` record, and the server applies them generically:

* ``waits``: an ``async def`` handler may wait (long polls, rebalances); a plain ``def`` never
  does (Produce: validate, append, answer), and the server runs it right where the request's
  bytes arrive, without waking the connection's task. For a producer that sends one request
  at a time, that task switch is a large part of the request's cost. A plain ``def`` that
  now and then must wait before it can answer (Produce once ``flush.messages`` is due: the
  answer goes out after the fsync) returns a :class:`Deferred`; the server hands it to the
  connection's task, which awaits it, and the requests after it on that connection wait
  their turn. The common case keeps its fast path: no task switch unless a Deferred comes.
* ``holds_answer``: the answer may be held back while more requests are queued, to go out
  with the next one in one write (pipelined Produce). Any other answer flushes what is held.
* ``unsupported_version``: how to answer a request of a version outside the served range
  instead of closing the connection (ApiVersions, KIP-511); None for every other API.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ...net.apis import ApiKey
from ...net.protocol import encode_response

if TYPE_CHECKING:
    import asyncio

    from kio.static.protocol import ResponsePayload

    from ...log import Log
    from ...net.fetch import Chunk
    from ...net.protocol import Request
    from ..api import BrokerApi
    from ..flusher import FlushResult

__all__ = ["SERVED", "Deferred", "Encoder", "Handler", "HandlerTable", "NotReplicatedError", "RequestContext",
           "coordinator_append_error", "coordinator_flushes", "encode_kio", "handler", "registry"]


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


async def coordinator_flushes(
        flushes: "list[tuple[Log, asyncio.Future[FlushResult]]]") -> "dict[Log, OSError]":
    """Wait for the ``flush.messages`` fsyncs a coordinator call made (``with
    broker.collect_flushes() as flushes``: its appends to ``__consumer_offsets`` or
    ``__transaction_state``, transaction markers) and return those that failed, by log. With
    none it returns at once, with no task switch: an append without a due flush is answered
    as before."""
    failed: dict[Log, OSError] = {}
    for partition_log, future in flushes:
        error = await future
        if error is not None:
            failed[partition_log] = error
    return failed


class NotReplicatedError(OSError):
    """A cluster member's coordinator append or marker that the ISR did not take (acks=all):
    ``code`` is the replication's answer (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    REQUEST_TIMED_OUT). Collected with the flushes, as a failed append is."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def coordinator_append_error(failed: "dict[Log, OSError]", storage: int) -> int:
    """A coordinator's answer when its appends failed: ``storage`` for a failed fsync; for a
    replication failure Kafka's coordinators' mapping (NOT_LEADER_OR_FOLLOWER: NOT_COORDINATOR,
    look it up again; too few in-sync replicas or a timeout: COORDINATOR_NOT_AVAILABLE)."""
    from kio.schema.errors import ErrorCode

    for error in failed.values():
        if isinstance(error, NotReplicatedError):
            if error.code == ErrorCode.not_leader_or_follower:
                return ErrorCode.not_coordinator
            return ErrorCode.coordinator_not_available
    return storage


class Deferred:
    """An answer a plain-``def`` handler cannot give yet: awaiting it gives the response.

    ``answer`` is a coroutine function called (with ``args``) only when the connection's task
    awaits it, so a Deferred dropped with its connection leaves no coroutine unawaited. It
    awaits nothing but ``waits_for``: until those are done the task handles the requests that
    arrive meanwhile (:meth:`ready`, :meth:`on_ready`)."""

    __slots__ = ("answer", "args", "waits_for")

    def __init__(self, answer: Callable[..., Awaitable[Any]], *args: Any,
                 waits_for: "Sequence[asyncio.Future[Any]]" = ()) -> None:
        self.answer = answer
        self.args = args
        self.waits_for = waits_for

    def ready(self) -> bool:
        """Awaiting it now would not wait."""
        return all(f.done() for f in self.waits_for)

    def on_ready(self, callback: "Callable[[asyncio.Future[Any]], object]") -> Callable[[], None]:
        """Call ``callback`` as each of ``waits_for`` completes; returns the undo."""
        pending = [f for f in self.waits_for if not f.done()]
        for future in pending:
            future.add_done_callback(callback)

        def undo() -> None:
            for future in pending:
                future.remove_done_callback(callback)

        return undo

    def __await__(self) -> Generator[Any, None, Any]:
        return self.answer(*self.args).__await__()


HandlerFn = Callable[["BrokerApi", RequestContext], Awaitable[Any] | Any]
Encoder = Callable[[int, int, Any], "bytes | list[Chunk]"]
"""(correlation id, api version, response) -> the response frame, size prefix included."""
UnsupportedVersionAnswer = Callable[["BrokerApi", int], "ResponsePayload"]
"""(broker, requested version) -> the response body to send instead of closing."""


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: ApiKey
    min_version: int
    max_version: int
    fn: HandlerFn
    waits: bool
    """True for an ``async def`` handler (await its result); False: ``fn`` answers at once."""
    encode: Encoder
    """Turns what ``fn`` returns into the frame. A plain-``def`` handler's encoder gives bytes."""
    holds_answer: bool = False
    """The answer may wait for the next write while more requests are queued."""
    unsupported_version: UnsupportedVersionAnswer | None = None
    """Answer a request of an unserved version with this body (else: close the connection)."""

    @property
    def name(self) -> str:
        return self.api_key.api_name


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
    "elect_leaders",
    "partition_reassignments",
    "controlled_shutdown",
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
    "txn_offset_commit",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
    "describe_cluster",
    "offsets_for_leader_epoch",
)


# What each module serves: api key -> (module, min version, max version). A broker advertises
# (ApiVersions) and decodes these versions without importing the handlers; a handler's module
# is imported with its API's first request (HandlerTable), which spares a start importing two
# dozen modules. The @handler line in the module states the same versions (the tests check
# both agree). A module of _MODULES that is not in this table is imported when a broker is
# built, and what it registers is served too.
SERVED: dict[int, tuple[str, int, int]] = {
    ApiKey.API_VERSIONS: ("api_versions", 0, 4),
    ApiKey.METADATA: ("metadata", 0, 12),
    ApiKey.PRODUCE: ("produce", 3, 9),
    ApiKey.FETCH: ("fetch", 4, 12),
    ApiKey.LIST_OFFSETS: ("list_offsets", 1, 7),
    ApiKey.CREATE_TOPICS: ("create_topics", 2, 7),
    ApiKey.DELETE_TOPICS: ("delete_topics", 1, 6),
    ApiKey.CREATE_PARTITIONS: ("create_partitions", 0, 3),
    ApiKey.ELECT_LEADERS: ("elect_leaders", 0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ("partition_reassignments", 0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ("partition_reassignments", 0, 0),
    ApiKey.CONTROLLED_SHUTDOWN: ("controlled_shutdown", 1, 3),
    ApiKey.ALTER_CONFIGS: ("configs", 0, 2),
    ApiKey.DESCRIBE_CONFIGS: ("configs", 1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("configs", 0, 1),
    ApiKey.DELETE_RECORDS: ("delete_records", 0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: ("describe_log_dirs", 1, 4),
    ApiKey.INIT_PRODUCER_ID: ("init_producer_id", 0, 4),
    ApiKey.FIND_COORDINATOR: ("find_coordinator", 0, 4),
    ApiKey.JOIN_GROUP: ("join_group", 0, 9),
    ApiKey.SYNC_GROUP: ("sync_group", 0, 5),
    ApiKey.HEARTBEAT: ("heartbeat", 0, 4),
    ApiKey.LEAVE_GROUP: ("leave_group", 0, 5),
    ApiKey.OFFSET_COMMIT: ("offset_commit", 2, 9),
    ApiKey.OFFSET_FETCH: ("offset_fetch", 1, 9),
    ApiKey.TXN_OFFSET_COMMIT: ("txn_offset_commit", 0, 4),
    ApiKey.LIST_GROUPS: ("list_groups", 0, 5),
    ApiKey.DESCRIBE_GROUPS: ("describe_groups", 0, 5),
    ApiKey.DELETE_GROUPS: ("delete_groups", 0, 2),
    ApiKey.OFFSET_DELETE: ("offset_delete", 0, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("add_partitions_to_txn", 0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: ("add_offsets_to_txn", 0, 4),
    ApiKey.END_TXN: ("end_txn", 0, 4),
    ApiKey.WRITE_TXN_MARKERS: ("write_txn_markers", 1, 2),
    ApiKey.DESCRIBE_TRANSACTIONS: ("describe_transactions", 0, 0),
    ApiKey.LIST_TRANSACTIONS: ("list_transactions", 0, 2),
    ApiKey.DESCRIBE_PRODUCERS: ("describe_producers", 0, 0),
    ApiKey.DESCRIBE_CLUSTER: ("describe_cluster", 0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("offsets_for_leader_epoch", 2, 4),
}


class HandlerTable(dict[int, Handler]):
    """One broker's api key -> Handler. ``table[key]`` imports the handler's module on its
    API's first request; ``get``, ``in`` and iteration see only the handlers imported so far
    (the server's fast path answers an API's first request the general way, which looks
    it up with ``[]``; :meth:`complete` imports the rest). ``supported`` is api key ->
    (min, max) of every API served, what ApiVersions advertises and the decoder accepts."""

    def __init__(self) -> None:
        super().__init__()
        lazy = {module for module, _low, _high in SERVED.values()}
        for module in _MODULES:
            if module not in lazy:
                importlib.import_module(f"{__name__}.{module}")
        self.update(_REGISTRY)  # those, and any imported before (another broker in this process)
        versions = {int(api_key): (low, high) for api_key, (_module, low, high) in SERVED.items()}
        versions.update({api_key: (h.min_version, h.max_version) for api_key, h in self.items()})
        self.supported: dict[int, tuple[int, int]] = dict(sorted(versions.items()))

    def __missing__(self, api_key: int) -> Handler:
        served = SERVED.get(api_key)
        if served is None:
            raise KeyError(api_key)
        importlib.import_module(f"{__name__}.{served[0]}")
        handler = self[api_key] = _REGISTRY[api_key]
        return handler

    def complete(self) -> "HandlerTable":
        """Import every handler (for what inspects them all, e.g. injected faults)."""
        for api_key in SERVED:
            self[api_key]  # noqa: B018 (imports on a miss)
        return self


def encode_kio(correlation_id: int, version: int, body: "ResponsePayload") -> bytes:
    """The default encoder: a kio response entity (its class fixes the version)."""
    return encode_response(correlation_id, body)


def handler(api_key: ApiKey, min_version: int, max_version: int, *, encode: Encoder = encode_kio,
            holds_answer: bool = False,
            unsupported_version: UnsupportedVersionAnswer | None = None) -> Callable[[HandlerFn], HandlerFn]:
    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in _REGISTRY:
            raise RuntimeError(f"two handlers for {api_key.api_name} (api key {int(api_key)})")
        _REGISTRY[int(api_key)] = Handler(api_key, min_version, max_version, fn,
                                          waits=inspect.iscoroutinefunction(fn), encode=encode,
                                          holds_answer=holds_answer, unsupported_version=unsupported_version)
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
