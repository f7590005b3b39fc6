"""The one SparkSession every pipeline uses.

``get_spark()`` resolves the master (argument, then ``KAFKASTORE_SPARK_MASTER``,
then ``spark.master`` in the config file, then ``local[*]``), applies
small-machine defaults, makes sure Python workers run the same interpreter and
can import ``kafkastore`` / ``pipelines``, and registers the ``kafkastore``
data source when :mod:`pipelines.source.datasource` exists.

Settings, lowest precedence first: the defaults below, the config file's
``spark.conf`` mapping, ``extra_conf``. ``spark.driver.extraJavaOptions`` is the
exception: the user's value is appended to the JVM defaults (:data:`JVM_DEFAULTS`)
rather than replacing them, and the JVM takes the last of a repeated option.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any, Mapping

from ..spec.job_config import load_config

log = logging.getLogger(__name__)
# pipelines/, the package this module sits one level below (source/).
_PIPELINES_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOG4J_CONF = os.path.join(_PIPELINES_DIR, "log4j2.properties")

DEFAULT_MASTER = "local[*]"

# Why each default: sessions are small (a laptop or a 2-core CI box), times are
# UTC everywhere in kafkastore, the data source prunes with pushed filters, and
# pandas/Arrow conversions should not fall back to row-by-row pickling.
_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.pythonUDF.arrow.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


# The driver JVM's options, ahead of any the user gives. For these jobs the JVM only
# orchestrates: Python workers decode the records and write Parquet with Arrow, the JVM
# schedules their tasks and hands them bytes (in local mode the driver JVM is also the
# executor). What it spent beyond that was fixed per job: compiling Spark's own paths
# (the JIT's compiler threads were 0.2-0.5 CPU s of a 1M-record load) and a
# multi-threaded collector for a heap that holds little. C1 compiles those paths in a
# fraction of the time and they run as fast for this work; the serial collector has no
# GC threads to wake. A user's own options come after these and win.
JVM_DEFAULTS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
)
# A JVM refuses two collectors: ours is left out when the user picks one.
_GC_OPTION = re.compile(r"-XX:\+Use\w*GC\b")

# Spark keeps one pool of Python workers (a daemon and the workers it forks) per distinct
# worker environment. Its SQL runners (mapInArrow, the data source, UDFs) add this variable
# to their workers' environment while its RDD runner does not, so a session that runs both
# kinds of job (a raw load is an RDD job, a decoded load a mapInArrow job) started and
# warmed two pools: twice the workers' start and imports, twice their memory, and the
# first big job of each kind paid the first touches of its workers' heaps again. Giving
# every worker the variable (it only shortens the Python traceback a failed task reports,
# as SQL jobs already do) makes the two environments equal: one pool serves both.
_SIMPLIFIED_TRACEBACK_ENV = "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK"
_SIMPLIFIED_TRACEBACK_SQL = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def _driver_java_options(user_options: str | None) -> str:
    """The driver JVM's options: the quiet log4j configuration and :data:`JVM_DEFAULTS`,
    then ``user_options`` (the JVM takes the last of a repeated option, so the user's
    win; our collector is dropped when the user's options choose one)."""
    user_options = (user_options or "").strip()
    ours = [f"-Dlog4j2.configurationFile=file:{_LOG4J_CONF}"]
    ours += [opt for opt in JVM_DEFAULTS
             if not (_GC_OPTION.match(opt) and _GC_OPTION.search(user_options))]
    return " ".join(ours + ([user_options] if user_options else []))


def _default_shuffle_partitions() -> str:
    # Spark's 200 is tuned for clusters; on a few cores it mostly creates tiny tasks.
    return str(min(64, max(4, 2 * (os.cpu_count() or 2))))


def _ui_default() -> str:
    # The UI binds a port and a thread pool; off under pytest or when asked.
    env = os.environ.get("KAFKASTORE_SPARK_UI")
    if env is not None:
        return "true" if env.strip().lower() in ("1", "true", "yes", "on") else "false"
    return "false" if "pytest" in sys.modules else "true"


def _project_root() -> str:
    """The directory holding the ``pipelines`` and ``kafkastore`` packages."""
    return os.path.dirname(_PIPELINES_DIR)


def _python_path_for_workers() -> str:
    """PYTHONPATH for Python workers so they import this checkout's packages.

    Installed packages are found anyway; a source checkout (tests, development)
    is not on the workers' path unless we add it. On a real cluster the
    package must be installed on the workers.
    """
    parts = [_project_root()]
    existing = os.environ.get("PYTHONPATH")
    if existing:
        parts.extend(p for p in existing.split(os.pathsep) if p and p not in parts)
    return os.pathsep.join(parts)


def _file_settings(conf_file: str | None) -> tuple[str | None, dict[str, str]]:
    """(master, conf) from the config file named by ``conf_file`` or ``KAFKASTORE_CONF``."""
    if not conf_file and not os.environ.get("KAFKASTORE_CONF"):
        return None, {}
    cfg = load_config(conf_file)
    return cfg.spark_master, dict(cfg.spark_conf)


def resolve_settings(master: str | None = None, app_name: str = "kafkastore",
                     extra_conf: Mapping[str, Any] | None = None,
                     conf_file: str | None = None) -> tuple[str, dict[str, str]]:
    """The master URL and the full Spark conf ``get_spark`` would use (no JVM started)."""
    file_master, file_conf = _file_settings(conf_file)
    conf: dict[str, str] = dict(_DEFAULTS)
    conf["spark.sql.shuffle.partitions"] = _default_shuffle_partitions()
    conf["spark.ui.enabled"] = _ui_default()
    conf["spark.executorEnv.PYTHONPATH"] = _python_path_for_workers()
    conf.update(file_conf)
    conf.update({str(k): str(v) for k, v in (extra_conf or {}).items()})
    if conf.get(_SIMPLIFIED_TRACEBACK_SQL, "true").strip().lower() != "false":
        conf.setdefault(_SIMPLIFIED_TRACEBACK_ENV, "1")   # one worker pool for RDD and SQL jobs
    chosen = (master or os.environ.get("KAFKASTORE_SPARK_MASTER") or conf.pop("spark.master", None)
              or file_master or DEFAULT_MASTER)
    conf.pop("spark.master", None)
    conf.setdefault("spark.app.name", app_name)
    if _is_loopback(chosen):
        # Stay on loopback so a laptop's changing network (or none) does not matter.
        conf.setdefault("spark.driver.host", "127.0.0.1")
        conf.setdefault("spark.driver.bindAddress", "127.0.0.1")
    # Quiet driver logs (warnings and up, without the start-up noise) and the JVM
    # defaults, with the user's options after them; only at JVM start.
    conf["spark.driver.extraJavaOptions"] = _driver_java_options(
        conf.get("spark.driver.extraJavaOptions"))
    return chosen, conf


def _is_loopback(master: str) -> bool:
    return master.startswith("local") or master.startswith(("spark://127.0.0.1", "spark://localhost"))


def get_spark(master: str | None = None, app_name: str = "kafkastore",
              extra_conf: Mapping[str, Any] | None = None, conf_file: str | None = None):
    """Return the process's SparkSession, creating it on first use.

    ``master`` wins over ``KAFKASTORE_SPARK_MASTER``, which wins over the config
    file (``conf_file`` or ``KAFKASTORE_CONF``); the default is ``local[*]``.
    ``extra_conf`` entries override everything else. If a session already runs,
    it is returned as is (Spark allows one per process); runtime-modifiable SQL
    settings from ``extra_conf`` are applied to it.

    Also sets ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` to this interpreter
    unless already set, and registers the ``kafkastore`` data source when
    :mod:`pipelines.source.datasource` is present.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession() or getattr(SparkSession, "_instantiatedSession", None)
    if active is not None and active.sparkContext._jsc is not None:
        for key, value in (extra_conf or {}).items():
            if str(key).startswith("spark.sql."):
                active.conf.set(str(key), str(value))
        _register_datasource(active)
        return active

    chosen, conf = resolve_settings(master, app_name, extra_conf, conf_file)
    builder = SparkSession.builder.master(chosen).appName(conf.pop("spark.app.name"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KAFKASTORE_SPARK_LOG_LEVEL", "WARN"))
    _register_datasource(spark)
    return spark


def _register_datasource(spark) -> None:
    """Register the ``kafkastore`` data source once per session (it needs pyspark, so it is
    imported here rather than at module level)."""
    from pipelines.source.datasource import register  # noqa: PLC0415  # lazy: pyspark start-up

    if getattr(spark, "_kafkastore_registered", False):
        return
    register(spark)
    spark._kafkastore_registered = True
