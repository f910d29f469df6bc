"""Which partition of ``__consumer_offsets`` / ``__transaction_state`` holds a key: the values
are Java's (``String.hashCode`` and Kafka's ``Utils.abs(hash) % 50``, computed with a JDK)."""

from __future__ import annotations

import pytest

from pulllog.net.coordinator_keys import java_string_hash, partition_for


@pytest.mark.parametrize(("key", "java_hash", "of_50"), [
    ("hello", 99162322, 22),
    ("my-txn", -1061187895, 45),
    ("eos-group", -1615206213, 13),
    ("gr\u00fcppe", -1233264812, 12),  # a Latin-1 character: one UTF-16 unit, two UTF-8 bytes
    ("\U0001F600", 1772899, 49),        # outside the BMP: two UTF-16 surrogates
    ("", 0, 0),
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Utils.abs makes it 0, not negative
])
def test_a_key_lands_where_kafka_puts_it(key: str, java_hash: int, of_50: int) -> None:
    assert java_string_hash(key) == java_hash
    assert partition_for(key, 50) == of_50
