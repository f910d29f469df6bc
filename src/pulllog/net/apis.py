"""The table of Kafka APIs by api key: the one place that names them.

``ApiKey`` lists the APIs pulllog serves, under the names Kafka users know (the RPC names
of Kafka's message definitions: ``ApiKey.JOIN_GROUP`` is JoinGroup, api key 11). Every
other place takes its names from here:

- the broker's handler registry registers each handler under an ``ApiKey`` with the
  versions that handler serves; the registry's table of served versions (``SERVED``,
  checked against the handlers by a test) is what ApiVersions advertises and what the
  request decoder enforces, before any handler is imported;
- log lines and protocol errors name an api key with :func:`api_name`;
- kio's request and response classes are looked up by api key
  (:func:`pulllog.net.build.response_class`).

An api key outside the table (a client asking for something pulllog does not serve)
is named from kio's index, so a log line still says "SaslHandshake", not "17".
"""

from __future__ import annotations

import enum

from kio.schema.index import api_key_map

__all__ = ["ApiKey", "api_name"]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    CONTROLLED_SHUTDOWN = 7  # a cluster member's, to the controller (schemas: net/controlled_shutdown.py)
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66

    @property
    def api_name(self) -> str:
        """Kafka's name: ``ApiKey.INIT_PRODUCER_ID.api_name == "InitProducerId"``."""
        return _camel(self.name)


def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.lower().split("_"))


def api_name(api_key: int) -> str:
    """The name Kafka users know for an api key: 1 -> "Fetch", 18 -> "ApiVersions"."""
    try:
        return ApiKey(api_key).api_name
    except ValueError:
        pass
    name = api_key_map.get(api_key)
    return _camel(name) if name is not None else f"api key {api_key}"
