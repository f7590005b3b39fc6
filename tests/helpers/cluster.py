"""A throwaway Spark standalone cluster on 127.0.0.1, built from pyspark's own scripts.

    with standalone_cluster(workers=2) as cluster:
        subprocess.run([sys.executable, "job.py", cluster.master_url], ...)

One master and ``workers`` workers (``spark-class ...Master`` / ``...Worker``),
each in its own process group so that stopping a worker also stops the
executors and Python workers it spawned. Ports are ephemeral (``--port 0``): the
master URL is read from the master's log, and the context manager yields only
once every worker has registered. Logs live in a temporary directory that is
kept (and named in the error) when startup fails.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Sequence

_MASTER_RE = re.compile(r"Starting Spark master at (spark://[\w.\-]+:\d+)")
_REGISTERED_RE = re.compile(r"Registering worker [\w.\-]+:\d+ with")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spark_home() -> str:
    """The pyspark installation, which ships ``bin/spark-class`` and the jars."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclass
class Cluster:
    """A running cluster: its master URL and where its logs are."""

    master_url: str
    work_dir: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def log(self, name: str) -> str:
        """Text of one daemon's log (``master``, ``worker-0``, ...)."""
        with open(os.path.join(self.work_dir, f"{name}.log"), errors="replace") as f:
            return f.read()

    def env(self) -> dict[str, str]:
        """Environment for a driver process that should use this cluster."""
        return _base_env(self.work_dir)


def _base_env(work_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    python_path = [PROJECT_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOG_DIR": work_dir,
        "SPARK_PID_DIR": work_dir,
        "SPARK_CONF_DIR": os.path.join(work_dir, "conf"),   # empty: no stray site config
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(python_path),
    })
    env.pop("KAFKASTORE_SPARK_MASTER", None)
    return env


def _start(cls: str, args: list[str], log_path: str, env: dict[str, str]) -> subprocess.Popen:
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    with open(log_path, "ab") as log:
        # A new session = a new process group: killpg then reaches executors too. The
        # working directory is the cluster's: processes_under finds every daemon.
        return subprocess.Popen([spark_class, cls, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                cwd=os.path.dirname(log_path))


def _wait_for(predicate, what: str, timeout: float, procs, work_dir: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark daemon exited (code {dead[0].returncode}) while waiting "
                               f"for {what}; logs in {work_dir}")
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {work_dir}")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL whatever is left after ``grace_s``."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        # The group may outlive its leader (executors, Python daemons): always sweep it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    # SIGKILL is asynchronous and orphans are reaped by init: wait until the groups are gone.
    deadline = time.monotonic() + grace_s
    for p in procs:
        while group_alive(p.pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes_under(directory: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every process whose working directory is ``directory`` or
    below it (a cluster's daemons, their executors and Python workers; also once the
    directory is deleted)."""
    directory = os.path.realpath(directory)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue   # gone, or not ours to look at
        if cwd == directory or cwd.startswith(directory + os.sep):
            found.append((int(pid), cmd))
    return found


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g",
                       timeout: float = 90.0, keep_logs: bool = False,
                       hosts: Sequence[str] | None = None):
    """Start a master and ``workers`` workers; yield a :class:`Cluster` once all registered.
    Worker ``i`` binds ``hosts[i]`` (default: 127.0.0.1 for all). Workers on addresses of
    their own (127.0.0.2, 127.0.0.3: all of 127/8 is loopback) are separate hosts to
    Spark's scheduler, which launches a speculative copy of a task only on another host."""
    work_dir = tempfile.mkdtemp(prefix="kafkastore-cluster-")
    os.makedirs(os.path.join(work_dir, "conf"), exist_ok=True)
    env = _base_env(work_dir)
    procs: list[subprocess.Popen] = []
    ok = False
    try:
        master_log = os.path.join(work_dir, "master.log")
        procs.append(_start("org.apache.spark.deploy.master.Master",
                            ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                            master_log, env))
        url = _wait_for(lambda: (m := _MASTER_RE.search(_read(master_log))) and m.group(1),
                        "the master to start", timeout, procs, work_dir)
        for i in range(workers):
            host = hosts[i] if hosts else "127.0.0.1"
            procs.append(_start(
                "org.apache.spark.deploy.worker.Worker",
                ["--host", host, "--port", "0", "--webui-port", "0",
                 "--cores", str(cores), "--memory", memory,
                 "--work-dir", os.path.join(work_dir, f"work-{i}"), url],
                os.path.join(work_dir, f"worker-{i}.log"),
                {**env, "SPARK_LOCAL_IP": host, "SPARK_LOCAL_HOSTNAME": host}))
        _wait_for(lambda: len(_REGISTERED_RE.findall(_read(master_log))) >= workers,
                  f"{workers} workers to register", timeout, procs, work_dir)
        cluster = Cluster(url, work_dir, procs)
        yield cluster
        ok = True
    finally:
        stop_processes(list(reversed(procs)))
        if ok and not keep_logs:
            shutil.rmtree(work_dir, ignore_errors=True)
