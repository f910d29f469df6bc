#!/usr/bin/env bash
# Install everything the tests need (Debian's kcat, the package with its test extras), then run them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v kcat >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq kcat >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
lint-imports --no-cache  # the layers (pyproject.toml [tool.importlinter]): no import from a layer above
exec python3 -m pytest "$@"
