"""What a running SparkSession's JVM actually runs with, read from the JVM itself (its
management beans), not from the conf Spark was given: the effective value of a HotSpot
option, the collectors in use, and a system property."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# The names the JVM gives the serial collector's young and old generation collectors.
SERIAL_COLLECTORS = {"Copy", "MarkSweepCompact"}
PARALLEL_COLLECTORS = {"PS Scavenge", "PS MarkSweep"}


def jvm_settings(spark) -> dict:
    """``{"TieredStopAtLevel": ..., "collectors": [...], "log4j": ...}`` of the session's
    driver JVM (in local mode the executor too)."""
    jvm = spark.sparkContext._jvm
    factory = jvm.java.lang.management.ManagementFactory
    hotspot = factory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return {
        "TieredStopAtLevel": hotspot.getVMOption("TieredStopAtLevel").getValue(),
        "collectors": sorted(bean.getName() for bean in factory.getGarbageCollectorMXBeans()),
        "log4j": jvm.java.lang.System.getProperty("log4j2.configurationFile"),
    }


def jvm_settings_of_a_new_session(conf_file: str, timeout: float = 300) -> dict:
    """:func:`jvm_settings` of a session that ``get_spark`` starts in a fresh Python
    process with ``KAFKASTORE_CONF=conf_file`` (a test process keeps to one session)."""
    script = textwrap.dedent("""
        import json, sys
        from pipelines.source.session import get_spark
        from tests.helpers.spark_jvm import jvm_settings
        spark = get_spark(master="local[1]", app_name="jvm-settings")
        print("SETTINGS " + json.dumps(jvm_settings(spark)))
        spark.stop()
    """)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KAFKASTORE_CONF=conf_file, PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.pop("KAFKASTORE_SPARK_MASTER", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=root, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("SETTINGS "):
            return json.loads(line[len("SETTINGS "):])
    raise AssertionError(f"no settings printed (exit {proc.returncode}): {proc.stderr[-2000:]}")
