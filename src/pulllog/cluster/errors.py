"""Why a cluster member could not start; importable without the ZooKeeper client (the CLI
reports these in one line)."""

from __future__ import annotations

__all__ = ["BrokerIdInUseError", "BrokerNotAvailableError", "ClusterStartError", "NotControllerError",
           "StaleBrokerEpochError", "TopicAlreadyExistsError"]


class ClusterStartError(Exception):
    """The broker cannot join the cluster (ZooKeeper unreachable, or its broker.id taken)."""


class BrokerIdInUseError(ClusterStartError):
    """Another live broker is registered under this broker.id."""


class TopicAlreadyExistsError(Exception):
    """CreateTopics of a topic ZooKeeper has already (or still has, marked for deletion)."""


class NotControllerError(Exception):
    """A request only the controller serves reached another broker (NOT_CONTROLLER)."""


class BrokerNotAvailableError(Exception):
    """ControlledShutdown for a broker that is not registered (BROKER_NOT_AVAILABLE)."""


class StaleBrokerEpochError(Exception):
    """ControlledShutdown from an earlier registration of the broker (STALE_BROKER_EPOCH)."""
