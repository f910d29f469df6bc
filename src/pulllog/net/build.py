"""Build version-specific kio messages from one description.

Why this module exists: Kafka's messages change shape from version to version (fields come
and go), and kio generates one dataclass per version. A handler serving JoinGroup v0-v9
would otherwise construct ten different classes. Instead it describes its response once,
with Kafka's field names in snake_case, and ``build(ResponseClass, data)`` keeps the fields
that version has, fills the rest from the schema's defaults, and converts plain values
(ints for error codes and durations, lists for arrays) to what kio's writers expect.
The result is an ordinary kio entity; :func:`pulllog.net.protocol.encode_response` is the
one encoder that turns it into bytes. Tests and the client use the same helper to build
requests of any version.

A field the version needs but the data lacks and the schema gives no default for is a
programming error and raises at once, naming it.

Classes are looked up by api key (:class:`pulllog.net.apis.ApiKey`) or by kio's module
name (``"join_group"``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import importlib
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from .protocol import load_request_schema, load_response_schema

__all__ = ["build", "response_class", "request_class", "to_plain"]

_ZERO_UUID = uuid.UUID(int=0)


@functools.cache
def response_class(api: int | str, version: int) -> type:
    """``response_class(ApiKey.METADATA, 12)`` (or ``"metadata"``) ->
    kio.schema.metadata.v12.response.MetadataResponse."""
    if isinstance(api, int):
        cls: type = load_response_schema(api, version)
    else:
        cls = _entity_in(importlib.import_module(f"kio.schema.{api}.v{version}.response"), "Response")
    if cls.__api_key__ in _FIXED_APIS:  # type: ignore[attr-defined]
        from .kio_fixes import fixed_response_class  # imported only when needed (start-up cost)

        return fixed_response_class(cls)  # kio's schema where it cannot carry what Kafka sends
    return cls


_FIXED_APIS = frozenset({65})
"""Api keys with a response schema corrected in :mod:`.kio_fixes` (DescribeTransactions)."""


@functools.cache
def request_class(api: int | str, version: int) -> type:
    if isinstance(api, int):
        return load_request_schema(api, version)  # type: ignore[no-any-return]
    module = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    return _entity_in(module, "Request")


def _entity_in(module: Any, suffix: str) -> type:
    for name in dir(module):
        obj = getattr(module, name)
        if isinstance(obj, type) and name.endswith(suffix) and dataclasses.is_dataclass(obj):
            if getattr(obj, "__type__", None) is not None and obj.__type__.name in ("request", "response"):
                return obj
    raise LookupError(f"no top-level {suffix} entity in {module.__name__}")


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Any, str | None, bool, bool, Any], ...]:
    """(name, element entity class or None, kafka_type, is_array, nullable, default) per field."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        is_array = nullable = False
        inner = hint
        origin = typing.get_origin(hint)
        if origin is typing.Union or origin is getattr(__import__("types"), "UnionType", None):
            nullable = type(None) in typing.get_args(hint)
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            inner = args[0] if args else hint
            origin = typing.get_origin(inner)
        if origin is tuple:
            is_array = True
            inner = typing.get_args(inner)[0]
        entity = inner if (isinstance(inner, type) and dataclasses.is_dataclass(inner)) else None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        plan.append((f.name, entity, f.metadata.get("kafka_type"), is_array, nullable, default))
    return tuple(plan)


def _convert(kafka_type: str | None, value: Any) -> Any:
    if value is None:
        return None
    if kafka_type == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=int(value))
    if kafka_type == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.timezone.utc)
    if kafka_type == "uuid":
        if value is None or isinstance(value, uuid.UUID):
            return value
        return uuid.UUID(str(value))
    if kafka_type == "records" and isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def build(cls: type, data: Mapping[str, Any] | Any) -> Any:
    """Instantiate kio entity ``cls`` from ``data`` (a mapping, or already an instance)."""
    if isinstance(data, cls):
        return data
    kwargs = {}
    for name, entity, kafka_type, is_array, nullable, default in _plan(cls):
        if name in data:
            value = data[name]
        elif default is not dataclasses.MISSING:
            continue
        elif kafka_type == "uuid":
            value = _ZERO_UUID
        else:
            raise KeyError(f"{cls.__module__}.{cls.__qualname__}: field {name!r} is required")
        if value is None and nullable:
            pass  # a null array (e.g. Metadata "all topics") stays null, not empty
        elif entity is not None:
            if is_array:
                value = tuple(build(entity, item) for item in (value or ()))
            elif value is not None:
                value = build(entity, value)
        elif is_array:
            value = tuple(_convert(kafka_type, v) for v in (value or ()))
        else:
            value = _convert(kafka_type, value)
        kwargs[name] = value
    return cls(**kwargs)


def to_plain(value: Any) -> Any:
    """kio entity -> dicts / lists / ints (for logs, tests and the CLI's --json)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, enum.Enum):
        return value.value
    return value
