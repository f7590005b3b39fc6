"""Installing just the log library (and the broker) does not pull Spark: setup.cfg keeps the
jobs' packages in extras, and the ``kafkastore`` console script runs the log's commands with
pyspark, pyiceberg, pandas (and the rest of the extras) unimportable; a job command then
says in one line which extra to install."""
from __future__ import annotations

import configparser
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# What the `spark` and `airflow` extras install; the prelude makes them unimportable, as in a
# venv where only `pip install kafkastore` ran.
# (fastavro is in install_requires: the broker's schema registry parses Avro schemas.)
BLOCKED = ("pyspark", "py4j", "pyiceberg", "pandas", "great_expectations", "airflow")
PRELUDE = f"""
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _NotInstalled())
from pipelines.cli import main
rc = main(sys.argv[1:])
leaked = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
if leaked:
    sys.exit(f"imported {{leaked}}")
sys.exit(rc)
"""


def kafkastore(root: str, *argv: str):
    """The console script without the extras: ``(argv for Popen, env)``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTORE_")}
    env["PYTHONPATH"] = str(ROOT)
    return [sys.executable, "-c", PRELUDE, "--root", root, *argv], env


def run(root: str, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    args, env = kafkastore(root, *argv)
    return subprocess.run(args, env=env, input=stdin, capture_output=True, text=True, timeout=120)


def test_the_log_commands_work_without_the_extras(tmp_path):
    root = f"file://{tmp_path}/log"
    done = run(root, "topics", "create", "t", "--partitions", "1")
    assert done.returncode == 0, done.stderr
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(3))
    done = run(root, "produce", "t", stdin=lines)
    assert done.returncode == 0, done.stderr
    done = run(root, "consume", "t")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["value"] for line in done.stdout.splitlines()] == ["v0", "v1", "v2"]


def test_the_broker_starts_and_stops_without_the_extras(tmp_path):
    args, env = kafkastore(f"file://{tmp_path}/log", "serve", "--listen", "127.0.0.1:0")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert "serving" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0, proc.stderr.read()


@pytest.mark.parametrize("argv, extra", [
    (("load", "t", "--warehouse", "WH", "--table", "tbl"), "spark"),
    (("sql", "SELECT 1"), "spark"),
])
def test_a_job_command_names_the_extra_in_one_line(tmp_path, argv, extra):
    root = f"file://{tmp_path}/log"
    assert run(root, "topics", "create", "t").returncode == 0
    done = run(root, *(a.replace("WH", f"file://{tmp_path}/wh") for a in argv))
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"kafkastore: error: `kafkastore {argv[0]}` needs the {extra} extra")
    assert f"pip install 'kafkastore[{extra}]'" in done.stderr


def test_install_requires_holds_no_spark_iceberg_or_airflow():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    names = {re.split(r"[\[<>=!~ ;]", line.strip(), maxsplit=1)[0].lower()
             for line in cfg["options"]["install_requires"].splitlines()
             if line.strip() and not line.strip().startswith("#")}
    assert "pyarrow" in names and "kio" in names
    assert not names & {"pyspark", "pyiceberg", "pandas", "apache-airflow",
                        "great-expectations"}
    extras = cfg["options.extras_require"]
    assert "pyspark==" in extras["spark"] and "pyiceberg" in extras["spark"]
    assert "apache-airflow" in extras["airflow"]


def test_only_the_extras_packages_become_the_one_line_error():
    from kafkastore.errors import ConfigError
    from pipelines.cli import missing_extra

    error = missing_extra(ModuleNotFoundError("no", name="great_expectations.core"), "sql")
    assert isinstance(error, ConfigError)
    assert str(error) == ("`kafkastore sql` needs the airflow extra (great_expectations.core is "
                          "not installed): pip install 'kafkastore[airflow]'")
    assert missing_extra(ModuleNotFoundError("no", name="no_such_module"), "load") is None
