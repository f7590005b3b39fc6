"""kafkastore.config: the log's part of the config file, its precedence and its errors."""
from __future__ import annotations

import os

import pytest

from kafkastore.cli.log_config import DEFAULT_ROOT, Config, load_config, read_config_file, resolve_url
from kafkastore.errors import ConfigError
from tests.helpers.cli import config_error, write_conf


pytestmark = pytest.mark.usefixtures("clean_config_env")


def test_no_file_gives_the_demo_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config()
    assert cfg == Config(root=f"file://{tmp_path}/demo/log")
    assert DEFAULT_ROOT == "file://./demo/log"


def test_flag_beats_environment_beats_file(tmp_path, monkeypatch):
    conf = write_conf(tmp_path, "root: file:///from-file\nstorage_options: {anon: true}\n"
                           "topics: {orders: {partitions: 3, config: {retention.ms: '1000'}}}\n")
    assert load_config(conf).root == "file:///from-file"
    monkeypatch.setenv("KAFKASTORE_ROOT", "s3://env/prefix")
    assert load_config(conf).root == "s3://env/prefix"
    cfg = load_config(conf, root="memory://flag")
    assert cfg.root == "memory://flag"
    assert cfg.storage_options == {"anon": True}
    assert cfg.topics == {"orders": {"partitions": 3, "config": {"retention.ms": "1000"}}}
    assert cfg.source == conf


def test_the_file_comes_from_kafkastore_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKASTORE_CONF", write_conf(tmp_path, "root: memory://conf-env\n"))
    assert load_config().root == "memory://conf-env"


def test_the_jobs_sections_are_known_but_not_read_by_the_log(tmp_path):
    conf = write_conf(tmp_path, "root: memory://r\nwarehouse: 5\nspark: {conf: 5}\nloads: x\n")
    cfg = load_config(conf)  # the jobs' sections are pipelines.config's to check
    assert cfg == Config(root="memory://r", source=conf)
    assert not hasattr(cfg, "warehouse")


def test_relative_urls_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_url("data/log") == f"file://{tmp_path}/data/log"
    assert resolve_url("file://rel/log") == f"file://{tmp_path}/rel/log"
    assert resolve_url("file:///abs/log") == "file:///abs/log"
    assert resolve_url("s3://b/p") == "s3://b/p"


@pytest.mark.parametrize("text, message", [
    ("- a\n", "must hold a mapping at the top level"),
    ("roots: x\n", "unknown key(s) ['roots']"),
    ("root: [unclosed\n", "is not valid YAML"),
    ("root: ''\n", "--root is empty (from the config file)"),
    ("topics: [a]\n", "'topics' must be a mapping"),
])
def test_bad_files_are_config_errors(tmp_path, text, message):
    assert message in config_error(load_config, tmp_path, text)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_config_file(str(tmp_path / "nope.yaml"))


def test_empty_root_in_the_environment_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKASTORE_ROOT", "")   # empty env: not set, falls through
    assert load_config(root="memory://x").root == "memory://x"
    with pytest.raises(ConfigError, match="--root is empty"):
        load_config(root="  ")
    assert os.environ["KAFKASTORE_ROOT"] == ""
