"""get_spark: settings precedence, defaults, one shared session, data source registration."""
from __future__ import annotations

import os

import pytest

from kafkastore.errors import ConfigError
from pipelines.source import session as session_mod
from pipelines.source.session import get_spark, resolve_settings


@pytest.fixture
def clean_env(monkeypatch):
    for key in ("KAFKASTORE_SPARK_MASTER", "KAFKASTORE_CONF", "KAFKASTORE_SPARK_UI"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_defaults(clean_env):
    master, conf = resolve_settings()
    assert master == "local[*]"
    assert conf["spark.sql.python.filterPushdown.enabled"] == "true"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.ui.enabled"] == "false"            # under pytest
    assert 4 <= int(conf["spark.sql.shuffle.partitions"]) <= 64
    assert conf["spark.app.name"] == "kafkastore"
    assert session_mod._project_root() in conf["spark.executorEnv.PYTHONPATH"].split(os.pathsep)
    assert conf["spark.driver.host"] == "127.0.0.1"


def test_precedence_argument_env_file(clean_env, tmp_path):
    conf_file = tmp_path / "kafkastore.yaml"
    conf_file.write_text("spark:\n  master: spark://file-host:7077\n"
                         "  conf: {spark.sql.shuffle.partitions: 3, spark.executor.memory: 2g}\n")
    master, conf = resolve_settings(conf_file=str(conf_file))
    assert master == "spark://file-host:7077"
    assert conf["spark.sql.shuffle.partitions"] == "3" and conf["spark.executor.memory"] == "2g"
    assert "spark.driver.host" not in conf                 # not a loopback master
    clean_env.setenv("KAFKASTORE_SPARK_MASTER", "spark://env-host:7077")
    assert resolve_settings(conf_file=str(conf_file))[0] == "spark://env-host:7077"
    master, conf = resolve_settings("local[3]", "app", {"spark.sql.shuffle.partitions": 5},
                                    conf_file=str(conf_file))
    assert master == "local[3]" and conf["spark.sql.shuffle.partitions"] == "5"
    assert conf["spark.app.name"] == "app"
    clean_env.setenv("KAFKASTORE_CONF", str(conf_file))
    clean_env.delenv("KAFKASTORE_SPARK_MASTER")
    assert resolve_settings()[0] == "spark://file-host:7077"


def test_ui_switch_and_bad_conf_file(clean_env, tmp_path):
    clean_env.setenv("KAFKASTORE_SPARK_UI", "1")
    assert resolve_settings()[1]["spark.ui.enabled"] == "true"
    with pytest.raises(ConfigError):
        resolve_settings(conf_file=str(tmp_path / "missing.yaml"))


def test_one_session_with_our_settings(spark):
    assert get_spark() is spark
    assert get_spark(extra_conf={"spark.sql.shuffle.partitions": "4"}) is spark
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert os.environ["PYSPARK_PYTHON"]
    # Python workers run our interpreter and can import this checkout.
    exe, path = spark.range(1).rdd.map(
        lambda _: (__import__("sys").executable, __import__("pipelines").__file__)).first()
    assert exe == os.environ["PYSPARK_PYTHON"] and path.startswith(session_mod._project_root())


def test_datasource_registration(spark, tmp_path):
    """get_spark registers the data source: the short name resolves and runs our option checks."""
    df_reader = spark.read.format("kafkastore").option("root", f"file://{tmp_path}/none")
    with pytest.raises(Exception, match="topic"):
        df_reader.option("topic", "missing-topic").load().collect()



def test_workers_get_the_sql_jobs_traceback_setting_unless_it_is_turned_off(clean_env):
    conf = resolve_settings()[1]
    assert conf["spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK"] == "1"
    off = {"spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false"}
    assert "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK" not in resolve_settings(extra_conf=off)[1]


def test_rdd_and_sql_jobs_run_in_one_pool_of_python_workers(spark):
    """A raw load is an RDD job and a decoded load a mapInArrow job: both run in the
    workers of one Python daemon (a worker's parent), not in two pools started apart."""
    def rdd_daemon(_):
        return [__import__("os").getppid()]

    def sql_daemon(batches):
        import os

        import pyarrow as pa

        for b in batches:
            yield pa.RecordBatch.from_pydict({"daemon": pa.array([os.getppid()] * b.num_rows,
                                                                 pa.int64())})

    by_rdd = set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(rdd_daemon).collect())
    by_sql = {r.daemon for r in spark.range(0, 2, 1, 2).mapInArrow(sql_daemon, "daemon long")
              .collect()}
    assert len(by_rdd) == 1 and by_sql == by_rdd
