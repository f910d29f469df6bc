"""The znodes of Kafka's ZooKeeper mode that pulllog writes and reads, with their formats.

No I/O here: paths, and JSON in and out, so the formats are plain unit tests. The formats are
Kafka's (ZooKeeper mode, Kafka 2.x / 3.x), so Kafka's own tools reading the same ZooKeeper see
what they expect. Paths are relative to the chroot of ``zookeeper.connect`` (``HOST:PORT/chroot``).

``/brokers/ids/<id>``: ephemeral, one per live broker (it vanishes with the broker's
ZooKeeper session), version 5::

    {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
     "endpoints": ["PLAINTEXT://127.0.0.2:9092"], "jmx_port": -1, "port": 9092,
     "host": "127.0.0.2", "version": 5, "timestamp": "1795631376871"}

  ``timestamp`` is the registration time in ms, as a string (Kafka writes it so).

``/controller``: ephemeral, the elected controller's id; whoever creates it is the controller
until its session ends::

    {"version": 1, "brokerid": 2, "timestamp": "1795631376871"}

``/controller_epoch``: persistent, the number of elections won so far, as decimal text
(``"3"``). It starts at 0; each new controller creates ``/controller`` and sets the epoch to
the one it read plus one *in one ZooKeeper transaction, conditional on the epoch's znode
version*, so two brokers can never win the same epoch, and a stale controller's writes can be
fenced by the epoch.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

__all__ = [
    "BROKER_IDS", "CONTROLLER", "CONTROLLER_EPOCH", "PERSISTENT_PATHS", "BrokerRegistration", "ClusterView",
    "ControllerRegistration", "ZnodeFormatError", "broker_path", "decode_epoch", "encode_epoch", "parse_zookeeper_connect",
]

BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
# Created (empty) at a broker's start when missing, as Kafka's brokers do: the parents of
# everything above, and the topic registry the next layer (topic assignments) fills.
PERSISTENT_PATHS = ("/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/topics", "/admin/delete_topics")

BROKER_ZNODE_VERSION = 5


class ZnodeFormatError(ValueError):
    """A znode whose data is not in the format Kafka's ZooKeeper mode uses."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker, as its ``/brokers/ids/<id>`` znode says."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        data: dict[str, object] = {
            "features": {},
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "endpoints": [f"PLAINTEXT://{self.host}:{self.port}"],
            "jmx_port": -1,
            "port": self.port,
            "host": self.host,
            "version": BROKER_ZNODE_VERSION,
            "timestamp": str(self.timestamp_ms or _now_ms()),
        }
        if self.rack is not None:
            data["rack"] = self.rack
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, broker_id: int, raw: bytes) -> BrokerRegistration:
        """From the znode's data. The PLAINTEXT endpoint is preferred (host/port are left out
        by a Kafka broker without a PLAINTEXT listener)."""
        data = _json_object(raw, broker_path(broker_id))
        host, port = data.get("host"), data.get("port")
        endpoints = data.get("endpoints")
        for endpoint in endpoints if isinstance(endpoints, list) else ():
            if isinstance(endpoint, str) and endpoint.startswith("PLAINTEXT://"):
                host, _, port_text = endpoint[len("PLAINTEXT://"):].rpartition(":")
                port = int(port_text) if port_text.isdigit() else None
                break
        if not isinstance(host, str) or not host or not isinstance(port, int) or port < 0:
            raise ZnodeFormatError(f"{broker_path(broker_id)}: no PLAINTEXT endpoint (host and port) in {raw!r}")
        rack = data.get("rack")
        return cls(broker_id, host, port, rack if isinstance(rack, str) else None, _int_or_zero(data.get("timestamp")))


@dataclass(frozen=True)
class ControllerRegistration:
    """The ``/controller`` znode: which broker is the controller."""

    broker_id: int
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        data = {"version": 1, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms or _now_ms())}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ControllerRegistration:
        data = _json_object(raw, CONTROLLER)
        broker_id = data.get("brokerid")
        if not isinstance(broker_id, int):
            raise ZnodeFormatError(f"{CONTROLLER}: no integer 'brokerid' in {raw!r}")
        return cls(broker_id, _int_or_zero(data.get("timestamp")))


def encode_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_epoch(raw: bytes) -> int:
    try:
        return int(raw.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH}: not a decimal number: {raw!r}") from None


@dataclass(frozen=True)
class ClusterView:
    """What one broker knows of the cluster: the live brokers (by id) and the controller
    (-1 while there is none, e.g. between a controller's death and the next election)."""

    brokers: tuple[BrokerRegistration, ...] = ()
    controller_id: int = -1
    controller_epoch: int = 0


def parse_zookeeper_connect(connect: str) -> tuple[str, str]:
    """``HOST:PORT[,HOST:PORT...][/chroot]`` -> (hosts, chroot); chroot ``""`` for the root.

    Kafka's syntax: the chroot follows the last host and applies to all of them."""
    text = connect.strip()
    hosts, slash, chroot = text.partition("/")
    if not hosts or any(not h.strip() or ":" not in h for h in hosts.split(",")):
        raise ValueError(f"zookeeper.connect={connect!r}: expected HOST:PORT[,HOST:PORT...][/chroot], "
                         "e.g. 127.0.0.1:2181/pulllog")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def _json_object(raw: bytes, path: str) -> dict[str, object]:
    try:
        data = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{path}: not JSON: {raw!r}") from None
    if not isinstance(data, dict):
        raise ZnodeFormatError(f"{path}: not a JSON object: {raw!r}")
    return data


def _int_or_zero(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
