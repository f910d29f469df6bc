"""The broker: request handling, the purgatory, topic and partition management."""

from .broker import Broker
from .config import BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
