#!/usr/bin/env bash
# Install everything the tests need (Debian's kcat, Java and Maven for the reference Kafka broker,
# Debian's zookeeper for the cluster tests, the package with its test extras, Kafka's jars), then run them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v kcat >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq kcat >/dev/null
fi
# Apache Kafka as the reference broker (tests/reference): Java 17+ and Maven run its jars.
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
fi
# ZooKeeper for the cluster tests (tests/cluster, scripts/zk_cluster.py): Debian's package, run
# straight from its jars in /usr/share/java with the JDK above.
if [ ! -e /usr/share/java/zookeeper.jar ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
python3 scripts/kafka_reference.py fetch >/dev/null  # Kafka's jars into ~/.cache/pulllog (once)
lint-imports --no-cache  # the layers (pyproject.toml [tool.importlinter]): no import from a layer above
exec python3 -m pytest "$@"
