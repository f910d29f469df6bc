"""The boundary between the broker and its request handlers.

Handlers get a partition's log through one call that answers with the log or Kafka's error
code; the handler table is the table of APIs (net/apis.py), so what is registered, advertised
and named in logs is one list; per-API rules are declared on the handler records.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kio.schema.errors import ErrorCode

from pulllog.broker.handlers import _MODULES, SERVED, registry
from pulllog.broker.topics import PartitionError, TopicManager
from pulllog.log import Log, LogConfig
from pulllog.net.apis import ApiKey, api_name


def test_partition_lookup_answers_the_log_or_unknown_topic_or_partition(tmp_path: Path) -> None:
    topics = TopicManager(tmp_path, LogConfig())
    topics.load()
    try:
        topics.create("events", 2)
        assert isinstance(topics.partition_log("events", 1), Log)
        assert topics.partition_log("events", 1) is topics.partition("events", 1).log
        missing_partition = topics.partition_log("events", 2)
        missing_topic = topics.partition_log("ghost", 0)
        negative = topics.partition_log("events", -1)
    finally:
        topics.close()
    assert missing_partition == PartitionError(ErrorCode.unknown_topic_or_partition, "topic 'events' has no partition 2")
    assert missing_topic == PartitionError(ErrorCode.unknown_topic_or_partition, "ghost")
    assert isinstance(negative, PartitionError) and negative.code is ErrorCode.unknown_topic_or_partition


def test_every_api_in_the_table_has_exactly_one_handler() -> None:
    handlers = registry()
    assert sorted(handlers) == sorted(int(key) for key in ApiKey)
    for api_key, h in handlers.items():
        assert h.api_key == api_key
        assert h.name == api_name(api_key)


def test_api_names_are_the_ones_kafka_users_know() -> None:
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(18) == "ApiVersions"
    assert api_name(17) == "SaslHandshake"  # not served: named from kio's index
    assert api_name(999) == "api key 999"


def test_per_api_rules_are_declared_on_the_handlers() -> None:
    handlers = registry()
    assert [k for k, h in handlers.items() if not h.waits] == [ApiKey.PRODUCE]
    assert [k for k, h in handlers.items() if h.holds_answer] == [ApiKey.PRODUCE]
    assert [k for k, h in handlers.items() if h.unsupported_version is not None] == [ApiKey.API_VERSIONS]


def test_the_served_table_states_what_each_handler_serves() -> None:
    # A broker advertises SERVED's versions and imports a handler module with its API's first
    # request: the table must say what the @handler lines say, module by module.
    handlers = registry()
    assert {k: (h.min_version, h.max_version) for k, h in handlers.items()} == {
        k: (low, high) for k, (_module, low, high) in SERVED.items()}
    for api_key, (module, _low, _high) in SERVED.items():
        assert handlers[api_key].fn.__module__ == f"pulllog.broker.handlers.{module}"
    assert set(_MODULES) == {module for module, _low, _high in SERVED.values()}


def test_a_broker_imports_a_handler_with_its_apis_first_request() -> None:
    code = ("import sys\nsys.modules['hypothesis'] = None\n"
            "from pulllog.broker.handlers import HandlerTable\n"
            "table = HandlerTable()\n"
            "assert 'pulllog.broker.handlers.metadata' not in sys.modules and 3 not in table\n"
            "assert table.supported[3] == (0, 12) and table.get(3) is None\n"
            "assert table[3].name == 'Metadata' and table.get(3) is table[3]\n"
            "assert 'pulllog.broker.handlers.metadata' in sys.modules\n"
            "assert 'pulllog.broker.handlers.fetch' not in sys.modules\n"
            "assert sorted(table.complete()) == sorted(table.supported)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
