"""Injected faults: make the broker fail, delay, lose or cut requests on purpose, in tests.

A test that needs a broker to misbehave (a partition leader that moved, a slow coordinator,
a connection that dies with a Produce in flight) asks for it here instead of racing a sleep
or routing the client through a lossy TCP proxy::

    rule = broker.faults.fail(PRODUCE, ErrorCode.not_leader_or_follower, topic="t", times=3)
    ...  # the producer retries; its fourth attempt is appended
    assert rule.fired == 3

Rules:

* A rule matches requests of one API key, and optionally only those that name a topic,
  a topic partition, or a group id. A request matches when *any* of its partitions is the
  rule's (a Produce for two partitions of the topic matches a rule for either); the action
  then applies to the whole request.
* Each rule has a budget (``times``, None for no limit) and a stride (``every``: it fires
  on every N-th request it matches, 1 by default, so losses can be spread over a stream).
  A request fires the first rule, in the order they were added, that matches, is on its
  stride and has budget left; that spends one.
  Spent rules stay listed, so a test can read ``fired``; :meth:`Faults.clear` drops them.
* Actions: answer with an error code instead of handling (:class:`FailWith`); handle after
  a delay (:class:`Delay`); close the connection before handling (:class:`DropConnection`)
  or after handling but before answering (``after_handling=True``: the request took effect
  and the client never heard, as when an answer is lost with its connection); or handle
  nothing and answer nothing while the connection stays up (:class:`LoseRequest`: the
  client hears only about later requests, and times this one out); or only count the
  request and handle it as usual (:class:`Observe`: a test waits until a client retried);
  or make the handler meet an OSError, as when the disk is full or no file descriptor is
  left (:class:`StorageFailure`: the server's answer to that is what the test checks).
* The server consults :meth:`Faults.intercept` once per request, and only while a rule is
  set (``if broker.faults:``; a Faults with no rule is false), so the produce path pays one
  truth test per read and nothing more. While a rule is set every request goes through the
  connection's task, where the one call site is.
* Rules may be added from another thread (the ``pulllog_broker`` fixture's test thread);
  they fire on the broker's event loop. A lock keeps the budget exact across the two.

Error answers are built for Produce, Fetch and ListOffsets (every partition of the request
carries the code), Metadata (every topic asked for), DescribeGroups, DeleteGroups and
OffsetFetch v8+ (every group), DescribeConfigs (every resource) and for the APIs whose
answer has one top-level error code (the group APIs, InitProducerId, Heartbeat, ...). The
server answers an OSError out of a handler with the same builder (KAFKA_STORAGE_ERROR).
Asking to fail another API raises at once, naming it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..net.build import build, response_class
from ..net.fetch import FetchPartitionResponse, FetchResponseData, FetchTopicResponse, encode_fetch_response
from ..net.protocol import encode_response
from ..net.produce import PartitionProduceResponse, TopicProduceResponse, encode_produce_response
from ..purgatory import OperationCancelled

if TYPE_CHECKING:
    from ..net.protocol import Request
    from .handlers import Handler, RequestContext

__all__ = ["Delay", "DropConnection", "FailWith", "FaultMatch", "FaultRule", "Faults", "InjectedDisconnect",
           "LoseRequest", "Observe", "StorageFailure"]

_PRODUCE = 0
_FETCH = 1
_LIST_OFFSETS = 2
_METADATA = 3
_OFFSET_FETCH = 9
_DESCRIBE_GROUPS = 15
_DESCRIBE_CONFIGS = 32
_DELETE_GROUPS = 42
# Answered with the code on every entry (these answers have no top-level error code, or not
# in every version): every partition, topic, group or config resource the request names.
_PER_ENTRY = (_PRODUCE, _FETCH, _LIST_OFFSETS, _METADATA, _OFFSET_FETCH, _DESCRIBE_GROUPS, _DESCRIBE_CONFIGS,
              _DELETE_GROUPS)
_NOT_REQUESTED = -(2**31)  # authorized operations the client did not ask for

# Fields some versions of an API's answer require besides the error code (no schema default).
_REQUIRED_BESIDES_ERROR: Mapping[str, Mapping[str, Any]] = {
    "join_group": {"generation_id": -1, "leader": "", "member_id": "", "members": [], "protocol_name": ""},
    "sync_group": {"assignment": b""},
    "init_producer_id": {"producer_id": -1, "producer_epoch": -1},
    "leave_group": {"members": []},
    "find_coordinator": {"node_id": -1, "host": "", "port": -1, "error_message": None},
}


class InjectedDisconnect(OperationCancelled):
    """A fault closes the connection; the server closes it quietly, as for a cancelled request."""


@dataclass(frozen=True, slots=True)
class FailWith:
    """Answer with ``error_code`` (Kafka's number) instead of handling the request."""

    error_code: int


@dataclass(frozen=True, slots=True)
class Delay:
    """Handle the request ``ms`` milliseconds late (the connection's later requests wait too)."""

    ms: int


@dataclass(frozen=True, slots=True)
class DropConnection:
    """Close the connection: before handling, or after handling instead of answering."""

    after_handling: bool = False


@dataclass(frozen=True, slots=True)
class LoseRequest:
    """Neither handle nor answer; the connection stays up (the request never arrived)."""


@dataclass(frozen=True, slots=True)
class Observe:
    """Handle as usual; only count (``FaultRule.fired``): a test waits until a client has sent
    the request, e.g. retried it, instead of sleeping for the retry to happen."""


@dataclass(frozen=True, slots=True)
class StorageFailure:
    """The handler raises OSError(``errno``) instead of handling: the OS refused it storage."""

    errno: int


Action = FailWith | Delay | DropConnection | LoseRequest | Observe | StorageFailure


@dataclass(frozen=True, slots=True)
class FaultMatch:
    """Which requests a rule applies to: one API key, optionally a topic, partition, group."""

    api_key: int
    topic: str | None = None
    partition: int | None = None
    group: str | None = None

    def matches(self, request: "Request") -> bool:
        if request.api_key != self.api_key:
            return False
        body = request.body
        if self.group is not None and getattr(body, "group_id", None) != self.group:
            return False
        if self.topic is None and self.partition is None:
            return True
        return any((self.topic is None or topic == self.topic) and (self.partition is None or index == self.partition)
                   for topic, index in named_partitions(body))


@dataclass(eq=False)
class FaultRule:
    """A match, an action and a budget; ``fired`` counts the requests it took."""

    match: FaultMatch
    action: Action
    times: int | None
    every: int = 1
    fired: int = 0
    matched: int = 0  # requests that matched, fired or not (the stride counts these)

    @property
    def spent(self) -> bool:
        return self.times is not None and self.fired >= self.times


class Faults:
    """The broker's injected faults (``broker.faults``); false while no rule is set."""

    def __init__(self, handlers: Mapping[int, "Handler"]) -> None:
        self._handlers = handlers
        self._rules: list[FaultRule] = []
        self._armed = 0  # rules with budget left: the server's guard reads this through __bool__
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return self._armed > 0

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    # -- adding rules -------------------------------------------------------------

    def fail(self, api_key: int, error_code: int, *, topic: str | None = None, partition: int | None = None,
             group: str | None = None, times: int | None = 1, every: int = 1) -> FaultRule:
        """Answer the next ``times`` matching requests with ``error_code`` (an int or kio ErrorCode)."""
        code = int(getattr(error_code, "value", error_code))
        self._check_error_answer(api_key)
        return self.add(FaultMatch(api_key, topic, partition, group), FailWith(code), times, every)

    def delay(self, api_key: int, ms: int, *, topic: str | None = None, partition: int | None = None,
              group: str | None = None, times: int | None = 1, every: int = 1) -> FaultRule:
        """Handle the next ``times`` matching requests ``ms`` milliseconds late."""
        return self.add(FaultMatch(api_key, topic, partition, group), Delay(ms), times, every)

    def drop_connection(self, api_key: int, *, after_handling: bool = False, topic: str | None = None,
                        partition: int | None = None, group: str | None = None, times: int | None = 1,
                        every: int = 1) -> FaultRule:
        """Close the connection on the next ``times`` matching requests (see :class:`DropConnection`)."""
        return self.add(FaultMatch(api_key, topic, partition, group), DropConnection(after_handling), times, every)

    def lose_request(self, api_key: int, *, topic: str | None = None, partition: int | None = None,
                     group: str | None = None, times: int | None = 1, every: int = 1) -> FaultRule:
        """Ignore the next ``times`` matching requests: no effect, no answer."""
        return self.add(FaultMatch(api_key, topic, partition, group), LoseRequest(), times, every)

    def fail_storage(self, api_key: int, errno: int, *, topic: str | None = None, partition: int | None = None,
                     group: str | None = None, times: int | None = 1, every: int = 1) -> FaultRule:
        """Make the next ``times`` matching requests meet OSError(``errno``), e.g. errno.ENOSPC."""
        return self.add(FaultMatch(api_key, topic, partition, group), StorageFailure(errno), times, every)

    def observe(self, api_key: int, *, topic: str | None = None, partition: int | None = None,
                group: str | None = None, times: int | None = None) -> FaultRule:
        """Count the matching requests (``rule.fired``) and handle them as usual."""
        return self.add(FaultMatch(api_key, topic, partition, group), Observe(), times)

    def add(self, match: FaultMatch, action: Action, times: int | None = 1, every: int = 1) -> FaultRule:
        if match.api_key not in self._handlers:
            raise ValueError(f"the broker serves no API with key {match.api_key}; pick one of {sorted(self._handlers)}")
        if times is not None and times < 1:
            raise ValueError(f"times={times}: a rule fires at least once (None: until cleared)")
        if every < 1:
            raise ValueError(f"every={every}: a rule fires on every N-th matching request, N >= 1")
        rule = FaultRule(match, action, times, every)
        with self._lock:
            self._rules.append(rule)
            self._armed += 1
        return rule

    def clear(self) -> None:
        """Drop every rule; the broker behaves normally again."""
        with self._lock:
            self._rules.clear()
            self._armed = 0

    # -- what the server calls ----------------------------------------------------

    async def intercept(self, handler: "Handler", request: "Request") -> "Handler":
        """The handler to run for ``request``: ``handler`` itself (perhaps after a delay), or
        one that answers an error, answers nothing, or raises :exc:`InjectedDisconnect`."""
        rule = self._take(request)
        if rule is None:
            return handler
        action = rule.action
        if isinstance(action, Observe):
            return handler
        if isinstance(action, Delay):
            await asyncio.sleep(action.ms / 1000)
            return handler
        if isinstance(action, FailWith):
            answer = error_answer(request, action.error_code)
            return dataclasses.replace(handler, fn=lambda _broker, _ctx: answer, waits=False, encode=_as_built)
        if isinstance(action, LoseRequest):
            return dataclasses.replace(handler, fn=lambda _broker, _ctx: None, waits=False)
        if isinstance(action, StorageFailure):
            code = action.errno

            def refused(_broker: Any, _ctx: "RequestContext") -> None:
                raise OSError(code, f"{os.strerror(code)} (injected fault)")

            return dataclasses.replace(handler, fn=refused, waits=False)
        if not action.after_handling:
            return dataclasses.replace(handler, fn=_disconnect, waits=False)
        real = handler

        async def handle_then_disconnect(broker: Any, ctx: "RequestContext") -> Any:
            response = real.fn(broker, ctx)
            if real.waits:
                await response
            raise InjectedDisconnect(f"injected fault: {real.name} handled, its answer lost with the connection")

        return dataclasses.replace(handler, fn=handle_then_disconnect, waits=True)

    def _take(self, request: "Request") -> FaultRule | None:
        with self._lock:
            for rule in self._rules:
                if not rule.spent and rule.match.matches(request):
                    rule.matched += 1
                    if rule.matched % rule.every:
                        continue  # off its stride: the request passes this rule
                    rule.fired += 1
                    if rule.spent:
                        self._armed -= 1
                    return rule
        return None

    def _check_error_answer(self, api_key: int) -> None:
        handler = self._handlers.get(api_key)
        if handler is None or api_key in _PER_ENTRY:
            return
        module = _kio_module(handler.name)
        for version in range(handler.min_version, handler.max_version + 1):
            cls = response_class(module, version)
            if "error_code" not in {f.name for f in dataclasses.fields(cls)}:
                raise ValueError(f"{handler.name} v{version} answers have no top-level error code; "
                                 "inject a delay or a dropped connection for it instead")
            encode_response(0, _generic_error_answer(module, version, 0))  # fails here, not in the server


def _as_built(correlation_id: int, _version: int, answer: Any) -> Any:
    """The encoder for :func:`error_answer`'s result: Produce and Fetch answers are frames
    already (bytes, or Fetch's chunks); the others are kio responses."""
    return answer if isinstance(answer, (bytes, list)) else encode_response(correlation_id, answer)


def _disconnect(_broker: Any, ctx: "RequestContext") -> None:
    raise InjectedDisconnect(f"injected fault: connection dropped before request {ctx.request.correlation_id}")


def _kio_module(api_name: str) -> str:
    """``"JoinGroup"`` -> ``"join_group"``, the kio schema package of that API."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api_name).lower()


def named_partitions(body: Any) -> Iterator[tuple[str, int]]:
    """(topic, partition) for every partition a request body names, whatever the API calls
    its fields (Produce: topic_data / name / partition_data / index; Fetch: topics / topic /
    partitions / partition; ListOffsets, OffsetCommit: topics / name / partitions /
    partition_index). A topic named without partitions yields partition -1."""
    topics = getattr(body, "topic_data", None) or getattr(body, "topics", None) or ()
    for topic in topics:
        name = getattr(topic, "name", None) or getattr(topic, "topic", None) or ""
        partitions = getattr(topic, "partition_data", None) or getattr(topic, "partitions", None)
        if not partitions:
            yield name, -1
            continue
        for p in partitions:
            index = p if isinstance(p, int) else next(
                (getattr(p, a) for a in ("index", "partition", "partition_index") if hasattr(p, a)), -1)
            yield name, int(index)


def error_answer(request: "Request", error_code: int) -> Any:
    """The answer to ``request`` that carries ``error_code`` (None where none is sent: acks=0)."""
    body: Any = request.body  # the API's own request entity (the api_key says which)
    version, correlation_id = request.api_version, request.correlation_id
    if request.api_key == _PRODUCE:
        if body.acks == 0:
            return None
        return encode_produce_response(correlation_id, version, [
            TopicProduceResponse(t.name, [PartitionProduceResponse(p.index, error_code) for p in t.partition_data])
            for t in body.topic_data])
    if request.api_key == _FETCH:
        return encode_fetch_response(correlation_id, version, FetchResponseData(topics=[
            FetchTopicResponse(name=t.topic, partitions=[
                FetchPartitionResponse(p.partition, error_code, records=b"") for p in t.partitions])
            for t in body.topics]))
    if request.api_key == _LIST_OFFSETS:
        return build(response_class("list_offsets", version), {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": error_code,
                                             "timestamp": -1, "offset": -1} for p in t.partitions]}
            for t in body.topics]})
    if request.api_key == _DELETE_GROUPS:
        return build(response_class("delete_groups", version), {"throttle_time": 0, "results": [
            {"group_id": g, "error_code": error_code} for g in body.groups_names]})
    if request.api_key == _DESCRIBE_CONFIGS:
        return build(response_class("describe_configs", version), {"throttle_time": 0, "results": [
            {"error_code": error_code, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name, "configs": []} for r in body.resources]})
    if request.api_key == _DESCRIBE_GROUPS:
        return build(response_class("describe_groups", version), {"throttle_time": 0, "groups": [
            {"error_code": error_code, "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": "",
             "members": [], "authorized_operations": _NOT_REQUESTED} for g in body.groups]})
    if request.api_key == _OFFSET_FETCH:
        return _offset_fetch_error_answer(body, version, error_code)
    if request.api_key == _METADATA:
        # Every topic asked for carries the code (none, when all were asked for). No broker is
        # listed: the client keeps the brokers it knows and asks again.
        return build(response_class("metadata", version), {
            "throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
            "topics": [{"error_code": error_code, "name": t.name, "topic_id": None, "is_internal": False,
                        "partitions": [], "topic_authorized_operations": _NOT_REQUESTED}
                       for t in body.topics or ()],
            "cluster_authorized_operations": _NOT_REQUESTED})
    return _generic_error_answer(type(body).__module__.split(".")[2], version, error_code)  # kio.schema.<api>.v<N>


def _offset_fetch_error_answer(body: Any, version: int, error_code: int) -> Any:
    if version >= 8:  # one entry per group
        return build(response_class("offset_fetch", version), {"throttle_time": 0, "groups": [
            {"group_id": g.group_id, "topics": [], "error_code": error_code} for g in body.groups]})
    if version >= 2:  # a top-level code
        return build(response_class("offset_fetch", version), {"throttle_time": 0, "topics": [],
                                                               "error_code": error_code})
    return build(response_class("offset_fetch", version), {"topics": [  # v1: a code per partition
        {"name": t.name, "partitions": [{"partition_index": p, "committed_offset": -1, "metadata": "",
                                         "error_code": error_code} for p in t.partition_indexes]}
        for t in body.topics or ()]})


def encoded_error_answer(request: "Request", error_code: int) -> Any:
    """:func:`error_answer` as it goes on the wire (a frame, or Fetch's chunks; None where no
    answer is sent). ValueError if the API's answer has no top-level error code to carry it."""
    if request.api_key not in _PER_ENTRY:
        module = type(request.body).__module__.split(".")[2]
        if "error_code" not in {f.name for f in dataclasses.fields(response_class(module, request.api_version))}:
            raise ValueError(f"{module} v{request.api_version} answers have no top-level error code")
    answer = error_answer(request, error_code)
    return None if answer is None else _as_built(request.correlation_id, request.api_version, answer)


def _generic_error_answer(module: str, version: int, error_code: int) -> Any:
    data = {"throttle_time": 0, "error_code": error_code, **_REQUIRED_BESIDES_ERROR.get(module, {})}
    return build(response_class(module, version), data)
