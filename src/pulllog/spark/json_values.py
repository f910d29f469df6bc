"""``pulllog export --value-format json``: record values parsed as JSON objects into columns.

The files keep every column of ``pulllog.spark.columns`` (the raw ``value`` bytes too, so
nothing a value holds is lost) and gain one more, ``value_json``: a struct with one field per
schema field, read as ``value_json.amount`` or flattened with ``select("value_json.*")``.

The schema is written like a Spark DDL of flat fields, ``"id long, name string, paid boolean"``:

    string    the JSON string                         Arrow string
    long      a JSON integer (bigint is the same)     int64
    int       a JSON integer within 32 bits           int32
    double    a JSON number (float: 32 bits)          float64 / float32
    boolean   true / false                            bool
    json      any JSON value, kept as its JSON text   string

Given with ``--value-schema``, or inferred from a sample of the first records to export: the
union of their fields, each typed by what it held (integers and floats together: double; an
object or array, or values of different kinds: json; only nulls: string).

Rules that keep the export exactly once:

- The schema is chosen once, by the first run that exports records, and stored in the
  progress file; every later run uses it, so all files of an export have the same columns. A
  run asked for another schema, or for raw values, is refused before anything is written
  (``--full`` starts over with a new one).
- A value that is not a JSON object, or a field whose value does not fit its type, fails the
  whole run, naming the partition and offset; like any failed run it publishes nothing.
  Fields not in the schema are not columns (the raw ``value`` keeps them). A null value (a
  tombstone) gives a null ``value_json``; a missing field, a null field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["COLUMN", "SAMPLE_RECORDS", "TYPES", "ValueSchema", "ValueSchemaError", "infer", "parse_values"]

COLUMN = "value_json"
SAMPLE_RECORDS = 1000  # values read to infer a schema

TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "bigint": pa.int64(), "int": pa.int32(), "integer": pa.int32(),
    "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(), "json": pa.string(),
}
_CANONICAL = {"bigint": "long", "integer": "int"}
_FIELD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|`[^`]+`)\s+([A-Za-z]+)\s*")
_INT32 = (-(2**31), 2**31 - 1)


class ValueSchemaError(ValueError):
    """A schema that cannot be parsed, or a value that does not fit it; one line."""


@dataclass(frozen=True, slots=True)
class ValueSchema:
    """Flat (name, type) fields, in column order; types are keys of ``TYPES``, canonical."""

    fields: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> ValueSchema:
        """``"id long, name string"`` (names may be `back-quoted`)."""
        fields = []
        for part in text.split(","):
            m = _FIELD.fullmatch(part)
            if m is None:
                raise ValueSchemaError(f"--value-schema {text!r}: expected NAME TYPE[, NAME TYPE...], "
                                       "e.g. 'id long, name string, paid boolean'")
            name, kind = m[1].strip("`"), m[2].lower()
            if kind not in TYPES:
                raise ValueSchemaError(f"--value-schema: field {name!r} has type {m[2]!r}; "
                                       f"use one of {', '.join(sorted(set(TYPES) - set(_CANONICAL)))}")
            fields.append((name, _CANONICAL.get(kind, kind)))
        names = [n for n, _ in fields]
        if len(set(names)) != len(names):
            raise ValueSchemaError(f"--value-schema {text!r}: a field name appears twice")
        return cls(tuple(fields))

    def __str__(self) -> str:
        return ", ".join(f"{_quote(n)} {t}" for n, t in self.fields)

    @property
    def arrow_type(self) -> pa.StructType:
        return pa.struct([pa.field(n, TYPES[t]) for n, t in self.fields])


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return "json"


def _merge(a: str | None, b: str | None) -> str | None:
    if a is None or a == b:
        return b if a is None else a
    if b is None:
        return a
    if {a, b} == {"long", "double"}:
        return "double"
    return "json"


def infer(values: Iterable[bytes | None], where: Sequence[tuple[int, int]] = ()) -> ValueSchema:
    """The schema of a sample of values (``where``: their (partition, offset), for errors)."""
    kinds: dict[str, str | None] = {}
    seen = 0
    for i, raw in enumerate(values):
        if raw is None:
            continue
        obj = _object(raw, where[i] if i < len(where) else None)
        seen += 1
        for name, value in obj.items():
            kinds[name] = _merge(kinds.get(name), _kind(value))
    if not kinds:
        raise ValueSchemaError("no JSON object fields in the records sampled to infer the value schema "
                               f"({seen} non-null values); give one with --value-schema")
    return ValueSchema(tuple((name, kind or "string") for name, kind in kinds.items()))


def _object(raw: bytes, at: tuple[int, int] | None) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueSchemaError(f"{_at(at)}the value is not JSON ({exc}); export it with --value-format raw") from None
    if not isinstance(obj, dict):
        raise ValueSchemaError(f"{_at(at)}the value is JSON but not an object ({type(obj).__name__}); "
                               "export it with --value-format raw")
    return obj


def _at(at: tuple[int, int] | None) -> str:
    return "" if at is None else f"partition {at[0]} offset {at[1]}: "


def _fit(value: Any, kind: str, name: str, at: tuple[int, int]) -> Any:
    if value is None:
        return None
    if kind == "json":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    ok = {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "long": isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63,
        "int": isinstance(value, int) and not isinstance(value, bool) and _INT32[0] <= value <= _INT32[1],
        "double": isinstance(value, (int, float)) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
    }[kind]
    if not ok:
        raise ValueSchemaError(f"{_at(at)}field {name!r} is {json.dumps(value)[:60]}, not a {kind}; "
                               "fix the --value-schema of a new export (--full), or export with --value-format raw")
    return float(value) if kind in ("double", "float") else value


def parse_values(values: pa.Array, partition: int, offsets: pa.Array, schema: ValueSchema) -> pa.StructArray:
    """The ``value_json`` column for one batch: each value parsed and checked against ``schema``."""
    rows: list[dict[str, Any] | None] = []
    for raw, offset in zip(values.to_pylist(), offsets.to_pylist()):
        if raw is None:
            rows.append(None)
            continue
        at = (partition, offset)
        obj = _object(raw, at)
        rows.append({name: _fit(obj.get(name), kind, name, at) for name, kind in schema.fields})
    return pa.array(rows, type=schema.arrow_type)
