"""Starting Spark for pulllog: find Java first, say plainly what is missing, keep the JVM quiet.

``start()`` is what ``pulllog export`` and ``scripts/bench_export.py`` use. Before the JVM
starts it checks, in this order, so that each problem is one clear line:

- pyspark is importable (``pip install 'pulllog[spark]'``);
- a ``java`` runs: ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java`` on PATH, and
  it is Java 17 or newer (Spark 4 needs it);
- PYSPARK_PYTHON is set to this interpreter unless the user set it, because Python workers
  started from another interpreter cannot import pulllog.

With ``log_path`` the JVM's own output (log4j start-up lines, warnings) goes to that file
rather than the terminal: the JVM inherits stderr when it is launched, so stderr is pointed
at the file for the duration of the launch only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["JAVA_HINT", "SparkStartError", "find_java", "start"]

JAVA_HINT = ("install Java 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) "
             "or set JAVA_HOME, or use --engine arrow, which needs no JVM")
MIN_JAVA = 17


class SparkStartError(RuntimeError):
    """Spark could not start; the message is one line that says what to do."""


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The java executable Spark will run, checked to be Java 17+; SparkStartError if none."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SparkStartError(f"JAVA_HOME is {home} but {java} is not there; {JAVA_HINT}")
    else:
        found = shutil.which("java", path=env.get("PATH"))
        if found is None:
            raise SparkStartError(f"Spark needs Java and no `java` is on PATH; {JAVA_HINT}")
        java = found
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkStartError(f"{java} does not run ({exc}); {JAVA_HINT}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m:
        major = int(m[1]) if m[1] != "1" else int(m[2] or 0)  # "1.8.0" is Java 8
        if major < MIN_JAVA:
            raise SparkStartError(f"Spark 4 needs Java {MIN_JAVA} or newer, {java} is Java {major}; {JAVA_HINT}")
    return java


@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def start(master: str = "local[*]", conf: Mapping[str, str] | None = None, *, app_name: str = "pulllog",
          log_path: Path | None = None, register: bool = True) -> Any:
    """A SparkSession with ``format("pulllog")`` registered; SparkStartError with one line if not."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkStartError("pyspark is not installed: pip install 'pulllog[spark]' "
                              "(or use --engine arrow, which needs only pyarrow)") from None
    find_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no LAN interface for a local job
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "8"}
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        with _stderr_to(log_path):
            spark = builder.getOrCreate()
    except Exception as exc:  # pyspark raises several kinds; all mean the same to a user
        where = f"; its output is in {log_path}" if log_path is not None else ""
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise SparkStartError(f"Spark failed to start ({first.strip()[:200]}){where}") from None
    spark.sparkContext.setLogLevel("ERROR")
    if register:
        from . import register as register_source

        register_source(spark)
    return spark
