"""The jobs' part of the configuration file: ``warehouse``, ``catalog``, ``spark``,
``loads``, ``compaction``, ``retention`` and ``quality`` (the file's shape is in
:mod:`kafkastore.cli.log_config`, which reads it and owns the log's sections).

Precedence as for the log: flags, environment (``KAFKASTORE_WAREHOUSE``,
``KAFKASTORE_SPARK_MASTER``), the file, defaults. Stdlib and yaml only: the DAG
files import this at parse time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import kafkastore.cli.log_config as log_config
from kafkastore.cli.log_config import resolve_url
from kafkastore.errors import ConfigError

DEFAULT_WAREHOUSE = "file://./demo/warehouse"


@dataclass(frozen=True)
class Config(log_config.Config):
    """The log's settings plus the jobs'; see :mod:`kafkastore.cli.log_config` for the file."""

    warehouse: str = DEFAULT_WAREHOUSE
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    loads: list[dict[str, Any]] = field(default_factory=list)
    compaction: dict[str, Any] = field(default_factory=dict)
    retention: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, Any] = field(default_factory=dict)
    catalog: dict[str, Any] = field(default_factory=dict)

    def load_for(self, topic: str, table: str | None = None) -> dict[str, Any]:
        """The ``loads`` entry for ``topic`` (and ``table`` if given), or ``{}``."""
        for entry in self.loads:
            if entry.get("topic") == topic and (table is None or entry.get("table") == table):
                return entry
        return {}


def load_config(path: str | None = None, *, root: str | None = None,
                warehouse: str | None = None) -> Config:
    """Read the config file (if any) and apply environment and explicit overrides."""
    path, data = log_config.read_config_file(path)
    spark = data.get("spark") or {}
    if not isinstance(spark, dict):
        raise ConfigError("'spark' must be a mapping like {master: 'local[*]', conf: {...}}")
    loads = data.get("loads") or []
    if not isinstance(loads, list) or not all(
            isinstance(x, dict) and ("topic" in x or "topic_pattern" in x) for x in loads):
        raise ConfigError("'loads' must be a list of mappings like {topic: t, table: name} "
                          "or {topic_pattern: 't\\..*', table_template: 'db.{topic}'}")
    log = log_config.log_settings(data, path=path, root=root)
    for key in ("compaction", "retention", "quality"):
        log_config.mapping(data, key, "{key: value, ...}")
    if not isinstance(spark.get("conf") or {}, dict):
        raise ConfigError("'spark.conf' must be a mapping like {spark.sql.shuffle.partitions: '8'}")
    return Config(
        **log,
        warehouse=resolve_url(log_config.setting(
            "--warehouse", warehouse, os.environ.get("KAFKASTORE_WAREHOUSE") or None,
            log_config.text(data, "warehouse"), DEFAULT_WAREHOUSE)),
        spark_master=(os.environ.get("KAFKASTORE_SPARK_MASTER")
                      or log_config.text(spark, "master", "spark.master")),
        spark_conf={str(k): str(v) for k, v in (spark.get("conf") or {}).items()},
        loads=[dict(x) for x in loads],
        compaction=dict(data.get("compaction") or {}),
        retention=dict(data.get("retention") or {}),
        quality=dict(data.get("quality") or {}),
        catalog=_catalog(data.get("catalog")),
    )


def _catalog(value: Any) -> dict[str, Any]:
    """The ``catalog:`` section: pyiceberg catalog properties (a mapping of scalars)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("'catalog' must be a mapping of pyiceberg catalog properties like "
                          "{type: rest, uri: 'http://...'}")
    return {str(k): v for k, v in value.items()}
