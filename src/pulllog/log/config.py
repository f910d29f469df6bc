"""Per-log (topic) configuration under Kafka's names.

``LogConfig.from_kafka({"segment.bytes": "1048576", ...})`` accepts the strings a user
or a CreateTopics request gives, checks each value, and raises ConfigError with a message
that names the key and what is allowed. The defaults are Kafka's.

Three settings need a word:

* ``preallocate=true`` is refused (INVALID_CONFIG). Kafka then creates each segment file at
  ``segment.bytes`` and truncates it on roll; recovery would have to tell the zero tail
  from a torn write. pulllog appends to files that are exactly as long as their data, so
  false is the only value that describes what it does.
* ``unclean.leader.election.enable`` is accepted, true or false: it lets an out-of-sync
  replica become leader. A pulllog partition has one replica, always in sync with itself,
  so there is never an election to allow or forbid; both values behave as they would on
  a one-broker Kafka cluster.
* ``max.compaction.lag.ms`` also caps ``segment.ms`` for a compacted topic (Kafka's
  ``maxSegmentMs``), so the active segment rolls and its records can be cleaned in time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

__all__ = ["LogConfig", "ConfigError", "TOPIC_CONFIG_KEYS"]

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An unknown config name or a value out of range (Kafka: INVALID_CONFIG)."""


def _long(lo: int, hi: int = LONG_MAX) -> Callable[[str, Any], int]:
    def parse(name: str, raw: Any) -> int:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected a whole number") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{name}={value}: must be between {lo} and {hi}")
        return value

    return parse


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(name: str, raw: Any) -> str:
        value = str(raw).strip()
        if value not in choices:
            raise ConfigError(f"{name}={value!r}: must be one of {', '.join(choices)}")
        return value

    return parse


def _cleanup_policy(name: str, raw: Any) -> str:
    parts = sorted({p.strip() for p in str(raw).split(",") if p.strip()})
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ConfigError(f"{name}={raw!r}: must be delete, compact, or compact,delete")
    return ",".join(parts)


def _compression_type(name: str, raw: Any) -> str:
    return _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")(name, raw)


def _preallocate(name: str, raw: Any) -> bool:
    if _bool(name, raw):
        raise ConfigError(
            f"{name}=true is not supported: pulllog does not preallocate segment files; leave it false"
        )
    return False


def _bool(name: str, raw: Any) -> bool:
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}={raw!r}: must be true or false")
    return value == "true"


# kafka name -> (attribute, parser)
_SPEC: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "segment.bytes": ("segment_bytes", _long(14, 2**31 - 1)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _long(8, 2**31 - 1)),
    "index.interval.bytes": ("index_interval_bytes", _long(0, 2**31 - 1)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-1)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", lambda n, r: _ratio(n, r)),
    "max.message.bytes": ("max_message_bytes", _long(0, 2**31 - 1)),
    "message.timestamp.type": ("message_timestamp_type", _choice("CreateTime", "LogAppendTime")),
    "compression.type": ("compression_type", _compression_type),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
    "preallocate": ("preallocate", _preallocate),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "min.insync.replicas": ("min_insync_replicas", _long(1, 2**31 - 1)),
}

TOPIC_CONFIG_KEYS = tuple(_SPEC)


def _ratio(name: str, raw: Any) -> float:
    try:
        value = float(str(raw))
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name}={value}: must be between 0 and 1")
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    # Derived from the settings above once, not on every read: the Produce path reads them
    # with every request (not settings: no init, not compared, not in fields' Kafka names).
    compact: bool = field(init=False, repr=False, compare=False)
    delete: bool = field(init=False, repr=False, compare=False)
    roll_ms: int = field(init=False, repr=False, compare=False)
    """The segment age that rolls the active segment (Kafka's ``maxSegmentMs``)."""
    log_append_time: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        policies = self.cleanup_policy.split(",")
        compact = "compact" in policies
        object.__setattr__(self, "compact", compact)
        object.__setattr__(self, "delete", "delete" in policies)
        roll_ms = self.segment_ms
        if compact and self.max_compaction_lag_ms > 0:
            roll_ms = min(roll_ms, self.max_compaction_lag_ms)
        object.__setattr__(self, "roll_ms", roll_ms)
        object.__setattr__(self, "log_append_time", self.message_timestamp_type == "LogAppendTime")

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any], base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka-named settings on top of ``base`` (defaults if None)."""
        changes = {}
        for name, raw in values.items():
            spec = _SPEC.get(name)
            if spec is None:
                raise ConfigError(f"unknown topic config {name!r}; known: {', '.join(sorted(_SPEC))}")
            attr, parse = spec
            changes[attr] = parse(name, raw)
        return replace(base or cls(), **changes)

    def to_kafka(self) -> dict[str, str]:
        out = {}
        for name, (attr, _parse) in _SPEC.items():
            value = getattr(self, attr)
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def diff_from(self, base: "LogConfig") -> dict[str, str]:
        """Kafka-named settings that differ from ``base`` (what a topic overrides)."""
        mine, theirs = self.to_kafka(), base.to_kafka()
        return {k: v for k, v in mine.items() if theirs[k] != v}


assert {a for a, _ in _SPEC.values()} == {f.name for f in fields(LogConfig) if f.init}
