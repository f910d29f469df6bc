"""The purgatory: delayed operations (long-poll Fetch, rebalances, later acks=all Produce)
held until their condition holds or their deadline passes, on a hierarchical timing wheel.

- :mod:`.timing_wheel`: Kafka's hierarchical timing wheel (the worked example is there);
- :mod:`.delayed`: :class:`DelayedOperation` and :class:`DelayedOperationPurgatory`.

Below the broker and the group coordinator, which both use it; it knows neither.
"""

from .delayed import DelayedOperation, DelayedOperationPurgatory, OperationCancelled, PurgatoryShutDown
from .timing_wheel import Clock, Timer, TimerTask, monotonic_ms

__all__ = [
    "Clock",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "OperationCancelled",
    "PurgatoryShutDown",
    "Timer",
    "TimerTask",
    "monotonic_ms",
]
