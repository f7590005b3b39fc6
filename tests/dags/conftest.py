"""Airflow for the DAG tests: AIRFLOW_HOME and its SQLite metadata DB in a temp dir.

Airflow reads its configuration when first imported, so the environment is set
here, when pytest loads this conftest (before any test module imports
airflow); the DB is created once per session with ``airflow db migrate``.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")

_HOME = tempfile.mkdtemp(prefix="kafkastore-airflow-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
_ENV = {
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": os.path.join(_HOME, "logs"),
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
}
if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != _HOME:
    # Another test module imported airflow first: its settings are fixed now.
    _ENV_OK = False
else:
    os.environ.update(_ENV)
    _ENV_OK = True


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated SQLite metadata DB under a temporary AIRFLOW_HOME."""
    if not _ENV_OK:
        pytest.skip("airflow was imported before tests/dags/conftest.py could configure it")
    env = dict(os.environ, **_ENV)
    proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout}\n{proc.stderr}")
    yield _HOME
    # Airflow pointed the root logger at pytest's captured stdout, which is closed
    # when py4j logs its goodbyes at interpreter exit: keep py4j's loggers off it.
    logging.getLogger("py4j").propagate = False
