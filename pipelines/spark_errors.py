"""Spark failures as one line: what failed, where, and why; the full trace goes to a log file.

A Spark job that fails on an executor surfaces on the driver as a py4j or
pyspark exception whose text is a JVM stack trace with the worker's Python
traceback inside (``PythonException`` / ``Py4JJavaError``): about 150 lines
for one damaged segment. :func:`summarize` turns it into one
:class:`SparkJobError` line: the command, the table and topic it worked on,
the partition and segment named by the worker's :class:`KafkaStoreError` (when
there is one, its message is the cause; otherwise the exception's first
meaningful line), and the path of a log file holding the full trace.

The CLI applies :func:`spark_errors` once, where it dispatches its Spark
commands (load, reprocess, compact, retention, sql, vacuum).
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
import traceback
from typing import Iterator

from kafkastore.errors import KafkaStoreError
from kafkastore.errors import SparkJobError  # noqa: F401  (re-exported)

#: Where full traces go: ``$KAFKASTORE_LOG_DIR`` or ``<tmp>/kafkastore-logs``.
LOG_DIR_ENV = "KAFKASTORE_LOG_DIR"

# "kafkastore.errors.SegmentMismatchError: does not match ..." in a worker's traceback text.
_WORKER_ERROR = re.compile(
    r"^(?:[\w.]*\.)?(?P<cls>\w+(?:Error|Conflict|Exception))\s*:\s*(?P<msg>.+)$", re.M)
_OURS = re.compile(r"^(?P<mod>(?:kafkastore|pipelines)(?:\.\w+)*)\.(?P<cls>\w+)\s*:\s*(?P<msg>.+)$",
                   re.M)
_SEGMENT = re.compile(r"topics/(?P<topic>[^/\s]+)/(?P<partition>\d+)/(?P<segment>\d{20}-\w+)\.log")




def is_spark_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from Spark or py4j (by its class's module, so no import needed)."""
    for cls in type(exc).__mro__:
        root = cls.__module__.split(".", 1)[0]
        if root in ("pyspark", "py4j"):
            return True
    return False


def _log_path(command: str) -> str:
    directory = os.environ.get(LOG_DIR_ENV) or os.path.join(tempfile.gettempdir(), "kafkastore-logs")
    os.makedirs(directory, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return os.path.join(directory, f"{command}-{stamp}-{os.getpid()}.log")


def _cause(text: str) -> tuple[str | None, str]:
    """(error class, message) of the worker's own error in ``text``: the last kafkastore or
    pipelines error line if any (what the worker raised on purpose), else the last
    ``SomethingError: ...`` line, else the first non-empty line."""
    ours = list(_OURS.finditer(text))
    if ours:
        m = ours[-1]
        return m.group("cls"), m.group("msg").strip()
    found = list(_WORKER_ERROR.finditer(text))
    if found:
        m = found[-1]
        return m.group("cls"), m.group("msg").strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(text).__name__)
    return None, first


def summarize(exc: BaseException, command: str, *, table: str | None = None,
              topic: str | None = None, log_path: str | None = None) -> SparkJobError:
    """One-line :class:`SparkJobError` for a Spark/py4j exception; writes the full trace to a
    log file (``log_path``, default under :data:`LOG_DIR_ENV`) and names it."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    path = log_path or _log_path(command)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        path = None
    cls, message = _cause(f"{exc}\n{text}")
    where = []
    if table:
        where.append(f"table {table}")
    seg = _SEGMENT.search(message) or _SEGMENT.search(text)
    if topic or seg:
        where.append(f"topic {seg.group('topic') if seg else topic}")
    if seg:
        where.append(f"partition {seg.group('partition')}")
        where.append(f"segment {seg.group('segment')}")
    cause = f"{cls}: {message}" if cls else message
    line = (f"{command} failed ({', '.join(where) or 'Spark job'}): {cause}"
            + (f"; full trace in {path}" if path else ""))
    return SparkJobError(" ".join(line.split()), log_path=path, cause_type=cls)


@contextlib.contextmanager
def spark_errors(command: str, *, table: str | None = None,
                 topic: str | None = None) -> Iterator[None]:
    """Turn Spark/py4j exceptions raised inside into :class:`SparkJobError` (see module doc).

    A :class:`KafkaStoreError` raised on the driver passes unchanged (it is one line
    already); anything that is neither is a bug and keeps its traceback.
    """
    try:
        yield
    except KafkaStoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - filtered right below
        if not is_spark_error(exc):
            raise
        raise summarize(exc, command, table=table, topic=topic) from None
