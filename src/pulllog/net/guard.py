"""Structural check of a message body before kio's native reader sees it.

Why this exists: kio's reader (Rust) sizes every array from its declared length before
reading a single element. A 5-byte body declaring an array of 2**32 elements makes it
ask for 32 GiB; the allocation fails and Rust *aborts the process* (no Python
exception, nothing to catch), so any peer could kill the broker with one frame.

So before decoding, we walk the body once with the same schema (kio's dataclasses and
their ``kafka_type`` / ``tag`` metadata) and refuse it unless every length is possible:

- an array declaring ``n`` elements needs at least ``n`` remaining bytes (no element is
  smaller than one byte), or ``n * size`` for fixed-size elements; then every element
  is walked, so kio never allocates more than 8 bytes per byte of the frame;
- strings, bytes and records must fit in what remains; only ``-1`` (legacy) or ``0``
  (compact) mean null, other negative lengths are refused;
- a tagged field's declared size must fit, and a tag we know must fill it exactly
  (its content is checked with its own schema, because kio decodes it too);
- a tag we do not know is dropped, as KIP-482 requires of readers (kio raises
  ``KeyError`` on it, which would turn a newer client's request into an error). When
  that happens the body is rewritten without those fields (and with the tag counts
  and enclosing tagged-field sizes adjusted); otherwise kio reads the frame in place;
- unsigned varints are at most 5 bytes, as in Kafka's ``ByteUtils.readUnsignedVarint``
  (read by :func:`pulllog.records.varint.read_uvarint`, whose ``VarintError`` becomes
  :class:`MalformedError` here);
- the body must end exactly at the end of the frame: trailing bytes mean the two sides
  disagree about the schema, and guessing would hide a bug.

Wire encodings walked (big-endian):

==================  ===========================  ==================================
type                non-flexible version         flexible version
==================  ===========================  ==================================
string              int16 length (-1 null)       uvarint length+1 (0 null)
bytes, records      int32 length (-1 null)       uvarint length+1 (0 null)
array               int32 count (-1 null)        uvarint count+1 (0 null)
nullable struct     int8 marker (-1 null, 1)     same
struct              its fields                   its fields, then the tag buffer
tag buffer          (none)                       uvarint n, n x (uvarint tag,
                                                 uvarint size, size bytes)
==================  ===========================  ==================================

Each schema is compiled once into nested closures (cached per entity class), so the
per-request cost is one Python call per variable-length field.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Final

from ..records.varint import VarintError, encode_uvarint, read_uvarint

__all__ = ["Edit", "MalformedError", "Skipper", "body_skipper", "entity_skipper", "skip_tag_buffer"]


class MalformedError(ValueError):
    """The bytes cannot hold a message of this schema; the message says where."""


Edit = tuple[int, int, bytes]
"""Replace ``buffer[start:end]`` with these bytes (used to drop unknown tagged fields)."""

Skipper = Callable[[bytes, int, int, list[Edit]], int]
"""``skip(buffer, position, end, edits) -> position after the value``.

Raises MalformedError; appends to ``edits`` when unknown tagged fields must go."""

_FIXED_SIZES: Final[dict[str, int]] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_STRING_TYPES: Final = frozenset({"string", "bytes", "records"})

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


def _truncated(what: str, position: int, need: int, end: int) -> MalformedError:
    return MalformedError(
        f"{what} at byte {position} needs {need} bytes but only {end - position} remain"
    )


def skip_tag_buffer(buffer: bytes, position: int, end: int) -> int:
    """A tag buffer (KIP-482) whose fields are all skipped -> the position after it."""
    if position < end and buffer[position] == 0:  # nearly always: no tagged fields
        return position + 1
    try:
        count, position = read_uvarint(buffer, position, end)
        for _ in range(count):
            _tag, position = read_uvarint(buffer, position, end)
            size, position = read_uvarint(buffer, position, end)
            if size > end - position:
                raise _truncated("tagged field", position, size, end)
            position += size
    except VarintError as error:  # net's boundary: a bad varint is a malformed message
        raise MalformedError(str(error)) from None
    return position


def _advance(size: int) -> Skipper:
    def skip_fixed(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        if end - position < size:
            raise _truncated("field", position, size, end)
        return position + size

    return skip_fixed


def _legacy_length(width: int) -> Skipper:
    """int16 (string) or int32 (bytes) length, -1 = null."""
    header = _INT16 if width == 2 else _INT32

    def skip_legacy(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        if end - position < width:
            raise _truncated("length", position, width, end)
        length: int = header.unpack_from(buffer, position)[0]
        position += width
        if length < 0:
            if length == -1:
                return position
            raise MalformedError(f"negative length {length} at byte {position - width}")
        if end - position < length:
            raise _truncated("string/bytes", position, length, end)
        return position + length

    return skip_legacy


def _skip_compact_string(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
    length_plus_one, position = read_uvarint(buffer, position, end)
    if length_plus_one > 1:
        length = length_plus_one - 1
        if end - position < length:
            raise _truncated("compact string/bytes", position, length, end)
        return position + length
    return position


def _array(element: Skipper, element_size: int | None, flexible: bool) -> Skipper:
    def skip_array(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        start = position
        if flexible:
            count, position = read_uvarint(buffer, position, end)
            count -= 1
        else:
            if end - position < 4:
                raise _truncated("array length", position, 4, end)
            (count,) = _INT32.unpack_from(buffer, position)
            position += 4
        if count <= 0:
            if count < -1:
                raise MalformedError(f"negative array length {count} at byte {start}")
            return position
        remaining = end - position
        if element_size is not None:
            if count * element_size > remaining:
                raise _truncated("array", position, count * element_size, end)
            return position + count * element_size
        if count > remaining:
            raise MalformedError(
                f"array at byte {start} declares {count} elements but only {remaining} bytes remain"
            )
        for _ in range(count):
            position = element(buffer, position, end, edits)
        return position

    return skip_array


def _nullable_struct(skip_struct: Skipper) -> Skipper:
    def skip_nullable(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        if position >= end:
            raise _truncated("nullable struct marker", position, 1, end)
        (marker,) = _INT8.unpack_from(buffer, position)
        if marker < 0:
            return position + 1
        return skip_struct(buffer, position + 1, end, edits)

    return skip_nullable


def _tag_buffer(known: dict[int, Skipper]) -> Skipper:
    def skip_tags(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        start = position
        count, position = read_uvarint(buffer, position, end)
        if count == 0:
            return position
        count_end = position
        if count > end - position:
            raise MalformedError(
                f"tag buffer at byte {start} declares {count} tagged fields "
                f"but only {end - position} bytes remain"
            )
        dropped = 0
        for _ in range(count):
            field_start = position
            tag, position = read_uvarint(buffer, position, end)
            size_start = position
            size, position = read_uvarint(buffer, position, end)
            if size > end - position:
                raise _truncated(f"tagged field {tag}", position, size, end)
            skip = known.get(tag)
            if skip is None:
                # KIP-482: a reader ignores tags it does not know. kio raises
                # KeyError instead, so the field is cut out before kio reads.
                edits.append((field_start, position + size, b""))
                dropped += 1
            else:
                inner: list[Edit] = []
                if skip(buffer, position, position + size, inner) != position + size:
                    raise MalformedError(
                        f"tagged field {tag} at byte {position} does not fill its {size} bytes"
                    )
                if inner:  # unknown tags nested in a known one: its size shrinks
                    removed = sum(stop - begin - len(new) for begin, stop, new in inner)
                    edits.append((size_start, position, encode_uvarint(size - removed)))
                    edits.extend(inner)
            position += size
        if dropped:
            edits.append((start, count_end, encode_uvarint(count - dropped)))
        return position

    return skip_tags


def _unwrap_optional(annotation: object) -> tuple[object, bool]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [arg for arg in typing.get_args(annotation) if arg is not types.NoneType]
        if len(args) != 1:
            raise TypeError(f"unsupported union in schema: {annotation!r}")
        return args[0], True
    return annotation, False


def _primitive(kafka_type: str, flexible: bool) -> tuple[Skipper, int | None]:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _advance(size), size
    if kafka_type in _STRING_TYPES:
        if flexible:
            return _skip_compact_string, None
        return _legacy_length(2 if kafka_type == "string" else 4), None
    raise TypeError(f"no wire encoding known for kafka_type {kafka_type!r}")


def _field(field: dataclasses.Field[object], flexible: bool, tagged: bool) -> Skipper:
    annotation, optional = _unwrap_optional(field.type)
    if typing.get_origin(annotation) is tuple:
        (element_type, _ellipsis) = typing.get_args(annotation)
        element_type, _ = _unwrap_optional(element_type)
        if dataclasses.is_dataclass(element_type):
            return _array(entity_skipper(element_type), None, flexible)  # type: ignore[arg-type]
        element, size = _primitive(field.metadata["kafka_type"], flexible)
        return _array(element, size, flexible)
    if dataclasses.is_dataclass(annotation):
        skip = entity_skipper(annotation)  # type: ignore[arg-type]
        # Tagged struct fields are optional by presence, not by a null marker (KIP-893
        # markers apply to plain nullable struct fields only), as kio writes them.
        return _nullable_struct(skip) if optional and not tagged else skip
    return _primitive(field.metadata["kafka_type"], flexible)[0]


@cache
def entity_skipper(entity_type: type) -> Skipper:
    """The compiled walker for one kio entity class (a request, response or struct)."""
    flexible: bool = entity_type.__flexible__  # type: ignore[attr-defined]
    steps: list[Skipper] = []
    tagged: dict[int, Skipper] = {}
    fixed_run = 0  # consecutive fixed-size fields collapse into one bounds check
    for field in dataclasses.fields(entity_type):
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = _field(field, flexible, tagged=True)
            continue
        kafka_type = field.metadata.get("kafka_type")
        annotation, _ = _unwrap_optional(field.type)
        if kafka_type in _FIXED_SIZES and typing.get_origin(annotation) is not tuple:
            fixed_run += _FIXED_SIZES[kafka_type]
            continue
        if fixed_run:
            steps.append(_advance(fixed_run))
            fixed_run = 0
        steps.append(_field(field, flexible, tagged=False))
    if fixed_run:
        steps.append(_advance(fixed_run))
    if flexible:
        steps.append(_tag_buffer(tagged))
    elif tagged:
        raise TypeError(f"{entity_type.__name__} has tagged fields but is not flexible")
    frozen_steps = tuple(steps)

    def skip_entity(buffer: bytes, position: int, end: int, edits: list[Edit]) -> int:
        for step in frozen_steps:
            position = step(buffer, position, end, edits)
        return position

    return skip_entity


def body_skipper(entity_type: type) -> Callable[[bytes, int], bytes | None]:
    """A check that ``buffer[position:]`` holds exactly one ``entity_type``, no more.

    Returns None when kio can read the body in place, or the body rewritten without
    unknown tagged fields (rare: only a newer peer sends them) to read from offset 0.
    """
    skip = entity_skipper(entity_type)

    def check_body(buffer: bytes, position: int) -> bytes | None:
        end = len(buffer)
        edits: list[Edit] = []
        try:
            stop = skip(buffer, position, end, edits)
        except VarintError as error:  # net's boundary: a bad varint is a malformed message
            raise MalformedError(str(error)) from None
        if stop != end:
            raise MalformedError(
                f"{end - stop} unexpected bytes after the body (ends at byte {stop} "
                f"of {end}): client and broker disagree about the schema"
            )
        if not edits:
            return None
        edits.sort()
        body = bytearray()
        cursor = position
        for begin, stop, replacement in edits:
            body += buffer[cursor:begin]
            body += replacement
            cursor = stop
        body += buffer[cursor:end]
        return bytes(body)

    return check_body
