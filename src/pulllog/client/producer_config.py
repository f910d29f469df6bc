"""Every Producer setting, validated in one place: ``ProducerConfig``.

A ``ProducerConfig`` is a frozen value. Building one checks every setting and resolves the
two that depend on each other (``acks`` and ``enable_idempotence``); a bad setting is a
``ValueError`` (or ``TypeError``) naming it and saying what to use. ``Producer(...)`` takes
the same keyword arguments and builds one, so ``producer.config`` is what it runs with.

Units follow Kafka's names: ``*_ms`` settings are milliseconds, sizes are bytes. The
``*_s`` properties are the same values in seconds, what asyncio's timers take.

Kafka 3.0+'s defaults for acks and idempotence (KIP-679), kept exactly:

* both left unset: ``acks="all"`` (-1) and idempotence on, unless ``max_in_flight`` is
  above 5 (the broker remembers an idempotent producer's last 5 batches per partition);
* idempotence unset, ``acks`` 0 or 1: idempotence off;
* ``enable_idempotence=True`` with ``acks`` 0 or 1, or with ``max_in_flight`` above 5:
  ``ValueError``;
* ``enable_idempotence=False``: ``acks`` stays as given, "all" when unset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..records.compression import Compression
from .cluster import DEFAULT_BOOTSTRAP
from .partitioner import Partitioner, PartitionerCallable, make_partitioner

__all__ = ["MAX_IDEMPOTENT_IN_FLIGHT", "ProducerConfig"]

# The broker remembers an idempotent producer's last 5 batches per partition
# (pulllog.log.producer_state): a retry is recognised only if it is among them.
MAX_IDEMPOTENT_IN_FLIGHT = 5

# Request header and Produce request framing around a batch: a batch takes the rest of
# max_request_size.
_REQUEST_FRAMING = 256

# (name, smallest value) of the settings that must be whole numbers
_WHOLE_NUMBERS = (
    ("batch_size", 0), ("buffer_memory", 1), ("max_block_ms", 0), ("max_request_size", 1),
    ("retries", 0), ("retry_backoff_ms", 0), ("delivery_timeout_ms", 1), ("request_timeout_ms", 1),
    ("max_in_flight", 1), ("metadata_max_age_ms", 0), ("transaction_timeout_ms", 1),
)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """A producer's settings, each with its Kafka name.

    bootstrap_servers (bootstrap.servers): host:port of one or several brokers.
    client_id (client.id): the name the broker logs for this client.
    acks (acks): "all" / -1 (default: every in-sync replica), 1 (the leader) or 0 (no
        answer). Resolved with enable_idempotence (module docstring) to 0, 1 or -1.
    compression (compression.type): None, "gzip", "snappy", "lz4" or "zstd" (one block per
        batch). Resolved to a ``Compression``.
    batch_size (batch.size): target bytes of records per batch; a larger record gets its own
        batch. A batch the broker refuses as MESSAGE_TOO_LARGE (a topic's max.message.bytes
        below it) is split in halves and resent, as Kafka's producer splits it; only a record
        or a send_batch() set that alone is too large fails.
    linger_ms (linger.ms): how long an open batch waits for more records before it is sendable.
    buffer_memory (buffer.memory): bytes of records not yet acknowledged before send() waits.
    max_block_ms (max.block.ms): how long send() waits for buffer space or a new topic's metadata.
    max_request_size (max.request.size): the largest record, message set or Produce request sent.
    retries / retry_backoff_ms (retries, retry.backoff.ms): resends of a batch after retriable
        errors, and the pause before each.
    delivery_timeout_ms (delivery.timeout.ms): the most a record may wait from send() to its outcome.
    request_timeout_ms (request.timeout.ms): how long a Produce request may wait for its answer.
    max_in_flight (max.in.flight.requests.per.connection): Produce requests awaiting a response
        per broker connection, and batches per partition. With idempotence (at most 5) the log
        keeps the send order whatever fails. Without it (acks 0 or 1, or
        enable_idempotence=False) a batch that is retried may land after batches sent behind
        it, as in Kafka: set max_in_flight=1 for strict order without idempotence.
    partitioner (partitioner.class): "sticky" (default), "round_robin", or
        fn(key, all_partitions, available_partitions) -> int.
    enable_idempotence (enable.idempotence): producer id, epoch and sequence numbers in every
        batch, so a retry is stored once and in order. None (default) as Kafka 3.0+: on,
        unless acks is 0 or 1 or max_in_flight > 5; True with those is a ValueError.
        Resolved to a bool.
    metadata_max_age_ms (metadata.max.age.ms): refresh partition leaders at least this often
        while sending.
    transactional_id (transactional.id): makes the producer transactional
        (``pulllog.client.transactions``); needs idempotence, so with it enable_idempotence
        None means True, and False (or acks 0 or 1) is a ValueError, as in Kafka.
    transaction_timeout_ms (transaction.timeout.ms): how long the coordinator lets a
        transaction stay open before it aborts it (at most the broker's
        transaction.max.timeout.ms, 15 minutes by default).
    """

    bootstrap_servers: str | Iterable[str] = DEFAULT_BOOTSTRAP
    client_id: str = "pulllog-producer"
    acks: int | str | None = None  # an int after resolving
    compression: str | Compression | None = None  # a Compression after resolving
    batch_size: int = 262_144  # 256 KiB, not 16 KiB: see pulllog.client.producer
    linger_ms: float = 0
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    max_request_size: int = 1_048_576
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight: int = 5
    partitioner: str | PartitionerCallable | Partitioner = "sticky"
    enable_idempotence: bool | None = None  # a bool after resolving
    metadata_max_age_ms: int = 300_000
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        for name, lo in _WHOLE_NUMBERS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < lo:
                raise ValueError(f"{name}={value!r}: must be a whole number >= {lo}")
        if self.linger_ms < 0:
            raise ValueError(f"linger_ms={self.linger_ms!r}: must be >= 0")
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ValueError(f"transactional_id={self.transactional_id!r}: must be a non-empty string")
            if self.enable_idempotence is False:
                raise ValueError("transactional_id needs idempotence: drop enable_idempotence=False "
                                 "(a transactional producer is idempotent)")
        acks, idempotent = resolve_idempotence(
            self.acks, True if self.transactional_id is not None else self.enable_idempotence, self.max_in_flight)
        # frozen: the resolved values replace what was given, once, here
        object.__setattr__(self, "acks", acks)
        object.__setattr__(self, "enable_idempotence", idempotent)
        object.__setattr__(self, "compression", Compression.parse(self.compression))
        if isinstance(self.partitioner, str):
            make_partitioner(self.partitioner)  # an unknown name fails here, not at the first send

    # ------------------------------------------------------------ derived values

    @property
    def batch_bytes(self) -> int:
        """The batch size used: ``batch_size``, but a batch must fit a request."""
        return max(1, min(self.batch_size, self.max_request_size - _REQUEST_FRAMING))

    @property
    def max_record_size(self) -> int:
        """The largest record or message set ``send()`` accepts."""
        return min(self.max_request_size, self.buffer_memory)

    @property
    def partition_in_flight(self) -> int:
        """Batches in flight per partition: with idempotence within the broker's window of 5."""
        if self.enable_idempotence:
            return min(self.max_in_flight, MAX_IDEMPOTENT_IN_FLIGHT)
        return self.max_in_flight

    @property
    def linger_s(self) -> float:
        return self.linger_ms / 1000

    @property
    def max_block_s(self) -> float:
        return self.max_block_ms / 1000

    @property
    def retry_backoff_s(self) -> float:
        return self.retry_backoff_ms / 1000

    @property
    def delivery_timeout_s(self) -> float:
        return self.delivery_timeout_ms / 1000

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

    @property
    def metadata_max_age_s(self) -> float:
        return self.metadata_max_age_ms / 1000


def parse_acks(acks: int | str | None) -> int | None:
    """0, 1 or -1 from what a user writes (``"all"`` is -1); None stays None (unset)."""
    if acks is None:
        return None
    value = -1 if isinstance(acks, str) and acks.strip().lower() == "all" else acks
    try:
        value = int(value)
    except (TypeError, ValueError):
        value = None  # type: ignore[assignment]
    if value not in (0, 1, -1):
        raise ValueError(f"acks={acks!r}: use 0 (no acknowledgement), 1 (the leader) or 'all' / -1")
    return value


def resolve_idempotence(acks: int | str | None, enable_idempotence: bool | None,
                        max_in_flight: int) -> tuple[int, bool]:
    """acks and idempotence by Kafka 3.0+'s rules: both default to on ("all"); idempotence left
    unset turns off by itself when acks is 0 or 1 or max_in_flight is above 5, and set to
    True it refuses them."""
    value = parse_acks(acks)
    if enable_idempotence is None:
        return (-1, max_in_flight <= MAX_IDEMPOTENT_IN_FLIGHT) if value is None else (
            value, value == -1 and max_in_flight <= MAX_IDEMPOTENT_IN_FLIGHT)
    if enable_idempotence:
        if value not in (None, -1):
            raise ValueError(f"enable_idempotence=True needs acks='all', not acks={acks!r}; "
                             "drop acks (it defaults to 'all') or set enable_idempotence=False")
        if max_in_flight > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ValueError(f"enable_idempotence=True allows max_in_flight <= {MAX_IDEMPOTENT_IN_FLIGHT}, "
                             f"not {max_in_flight}: the broker recognises retries only among a producer's "
                             f"last {MAX_IDEMPOTENT_IN_FLIGHT} batches")
        return -1, True
    return (-1 if value is None else value), False
