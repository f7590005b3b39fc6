"""pipelines.config: the jobs' sections of the config file on top of the log's."""
from __future__ import annotations

import pytest

from kafkastore.cli import log_config
from tests.helpers.cli import config_error, write_conf
from pipelines.cli import main
from pipelines.spec.job_config import Config, load_config


pytestmark = pytest.mark.usefixtures("clean_config_env")


def test_the_jobs_config_extends_the_logs(tmp_path, monkeypatch):
    conf = write_conf(tmp_path, "root: memory://r\nwarehouse: file:///wh\n"
                           "spark: {master: 'local[2]', conf: {spark.sql.shuffle.partitions: 4}}\n"
                           "loads: [{topic: orders, table: sales}]\nquality: {max_null: 0.1}\n"
                           "catalog: {type: sql}\ntopics: {orders: {partitions: 2}}\n")
    cfg = load_config(conf)
    assert isinstance(cfg, log_config.Config)
    assert (cfg.root, cfg.warehouse, cfg.topics) == ("memory://r", "file:///wh",
                                                      {"orders": {"partitions": 2}})
    assert (cfg.spark_master, cfg.spark_conf) == ("local[2]", {"spark.sql.shuffle.partitions": "4"})
    assert cfg.load_for("orders") == {"topic": "orders", "table": "sales"}
    assert cfg.load_for("orders", "other") == {}
    assert cfg.quality == {"max_null": 0.1} and cfg.catalog == {"type": "sql"}
    monkeypatch.setenv("KAFKASTORE_WAREHOUSE", "s3://b/wh")
    monkeypatch.setenv("KAFKASTORE_SPARK_MASTER", "local[1]")
    cfg = load_config(conf)
    assert (cfg.warehouse, cfg.spark_master) == ("s3://b/wh", "local[1]")
    assert load_config(conf, warehouse="memory://flag").warehouse == "memory://flag"


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config() == Config(root=f"file://{tmp_path}/demo/log",
                                   warehouse=f"file://{tmp_path}/demo/warehouse")


@pytest.mark.parametrize("text, message", [
    ("spark: 5\n", "'spark' must be a mapping"),
    ("spark: {conf: 5}\n", "'spark.conf' must be a mapping"),
    ("spark: {master: 5}\n", "'spark.master' in the config file must be a string"),
    ("loads: [{table: x}]\n", "'loads' must be a list of mappings"),
    ("quality: 5\n", "'quality' in the config file must be a mapping"),
    ("catalog: [1]\n", "'catalog' must be a mapping of pyiceberg catalog properties"),
    ("warehouse: ''\n", "--warehouse is empty (from the config file)"),
])
def test_bad_job_sections_are_config_errors(tmp_path, text, message):
    assert message in config_error(load_config, tmp_path, text)


def test_the_console_script_checks_the_jobs_sections_in_one_line(tmp_path, capsys):
    rc = main(["--conf", write_conf(tmp_path, "spark: {conf: 5}\n"), "topics", "list"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].startswith("kafkastore: error: 'spark.conf' must be a mapping")
