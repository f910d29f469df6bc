"""Client-side partition assignors: the group leader runs one over every member's subscription.

* ``range`` is the paper's Algorithm 1, per topic: sort the partitions and the members
  subscribed to the topic; member j takes a contiguous run of ``n // m`` partitions, and the
  first ``n % m`` members one more (Kafka's RangeAssignor).
* ``roundrobin``: all subscribed topic-partitions in order, dealt to the members in turn,
  skipping members not subscribed to that topic (Kafka's RoundRobinAssignor).
* ``cooperative-sticky``: balanced like round robin but keeping each member's owned
  partitions where balance allows (sticky); in the cooperative protocol a partition that
  moves is first revoked (left out of everyone's assignment this generation) and handed
  to its new owner in the follow-up rebalance, so no partition is ever owned twice.

Every assignor maps {member_id: Subscription} and {topic: partition count} to
{member_id: [(topic, partition), ...]}. Invariants (property-tested): complete, disjoint,
and for identical subscriptions balanced within one partition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..net.consumer_protocol import Subscription

__all__ = ["ASSIGNORS", "Assignor", "cooperative_sticky", "range_assign", "roundrobin"]

TP = tuple[str, int]
Assignor = Callable[[Mapping[str, Subscription], Mapping[str, int]], dict[str, list[TP]]]


def range_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TP]]:
    out: dict[str, list[TP]] = {m: [] for m in members}
    topics = sorted({t for s in members.values() for t in s.topics if t in partitions})
    for topic in topics:
        consumers = sorted(m for m, s in members.items() if topic in s.topics)
        n, m = partitions[topic], len(consumers)
        per, extra = divmod(n, m)
        for j, member in enumerate(consumers):
            start = j * per + min(j, extra)
            length = per + (1 if j < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + length))
    return out


def roundrobin(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TP]]:
    out: dict[str, list[TP]] = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    all_tps = sorted((t, p) for t in {t for s in members.values() for t in s.topics if t in partitions}
                     for p in range(partitions[t]))
    i = 0
    for topic, partition in all_tps:
        for _ in range(len(order)):
            member = order[i % len(order)]
            i += 1
            if topic in members[member].topics:
                out[member].append((topic, partition))
                break
    return out


def _sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TP]]:
    """A balanced assignment that keeps owned partitions where it can."""
    order = sorted(members)
    out: dict[str, list[TP]] = {m: [] for m in order}
    if not order:
        return out
    all_tps = sorted((t, p) for t in {t for s in members.values() for t in s.topics if t in partitions}
                     for p in range(partitions[t]))
    eligible = {tp: [m for m in order if tp[0] in members[m].topics] for tp in all_tps}
    # who owned what: on a conflict, the member claiming the newer generation wins
    owner: dict[TP, tuple[int, str]] = {}
    for m in order:
        sub = members[m]
        for tp in sub.owned_partitions:
            if tp in eligible and m in eligible[tp]:
                if tp not in owner or sub.generation_id > owner[tp][0]:
                    owner[tp] = (sub.generation_id, m)
    total = len(all_tps)
    per, extra = divmod(total, len(order))
    quota = {m: per for m in order}
    bigger = extra
    # keep owned partitions up to the quota; members owning more get ceil first
    for m in sorted(order, key=lambda m: -sum(1 for o in owner.values() if o[1] == m)):
        mine = sorted(tp for tp, (_g, o) in owner.items() if o == m)
        limit = quota[m] + (1 if bigger > 0 and len(mine) > quota[m] else 0)
        if limit > quota[m]:
            bigger -= 1
            quota[m] = limit
        out[m].extend(mine[:limit])
    taken = {tp for ps in out.values() for tp in ps}
    for tp in all_tps:
        if tp in taken:
            continue
        candidates = eligible[tp]
        if not candidates:
            continue
        target = min(candidates, key=lambda m: (len(out[m]), m))
        out[target].append(tp)
    for m in order:
        out[m].sort()
    return out


def cooperative_sticky(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, list[TP]]:
    target = _sticky(members, partitions)
    owned_by: dict[TP, str] = {}
    for m, sub in members.items():
        for tp in sub.owned_partitions:
            owned_by.setdefault(tp, m)
    # A partition moving from one member to another is withheld this round (revoked first).
    return {m: [tp for tp in tps if owned_by.get(tp, m) == m] for m, tps in target.items()}


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin,
    "cooperative-sticky": cooperative_sticky,
}
