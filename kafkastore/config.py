"""The configuration file (``conf/kafkastore.yaml``) and how settings are resolved.

Precedence, highest first: command-line flags, environment
(``KAFKASTORE_ROOT``, ``KAFKASTORE_WAREHOUSE``, ``KAFKASTORE_SPARK_MASTER``),
the file named by ``--conf`` or ``KAFKASTORE_CONF``, built-in defaults.

The file::

    root: file://./demo/log            # any fsspec URL: file://, memory://, s3://bucket/prefix
    warehouse: file://./demo/warehouse
    storage_options: {}                # passed to fsspec (s3fs: client_kwargs, key, secret, ...)
    catalog: {}                        # pyiceberg catalog properties (type: rest|sql|glue|hive, uri, ...);
                                       # empty: SQLite at <warehouse>/catalog.db (file:// warehouses only)
    spark: {master: "local[*]", conf: {spark.sql.shuffle.partitions: "8"}}
    topics:                            # created by `kafkastore topics create --from-conf` and the DAGs
      orders: {partitions: 3, config: {retention.ms: "604800000"}}
    loads:                             # topic -> warehouse table, used by `load` defaults and the DAGs
      - {topic: orders, table: orders, schedule: "@hourly", value_format: json, value_schema: "..."}
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

DEFAULT_ROOT = "file://./demo/log"
DEFAULT_WAREHOUSE = "file://./demo/warehouse"


@dataclass(frozen=True)
class Config:
    """Resolved settings; see the module docstring for the file's shape."""

    root: str = DEFAULT_ROOT
    warehouse: str = DEFAULT_WAREHOUSE
    storage_options: dict[str, Any] = field(default_factory=dict)
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    loads: list[dict[str, Any]] = field(default_factory=list)
    compaction: dict[str, Any] = field(default_factory=dict)
    retention: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, Any] = field(default_factory=dict)
    catalog: dict[str, Any] = field(default_factory=dict)
    source: str | None = None

    def load_for(self, topic: str, table: str | None = None) -> dict[str, Any]:
        """The ``loads`` entry for ``topic`` (and ``table`` if given), or ``{}``."""
        for entry in self.loads:
            if entry.get("topic") == topic and (table is None or entry.get("table") == table):
                return entry
        return {}


def resolve_url(url: str) -> str:
    """Make ``file://relative`` and bare relative paths absolute against the working directory."""
    if "://" not in url:
        return "file://" + os.path.abspath(url)
    scheme, rest = url.split("://", 1)
    if scheme == "file" and not rest.startswith("/"):
        return "file://" + os.path.abspath(rest)
    return url


def load_config(path: str | None = None, *, root: str | None = None,
                warehouse: str | None = None) -> Config:
    """Read the config file (if any) and apply environment and explicit overrides."""
    path = path or os.environ.get("KAFKASTORE_CONF")
    data: dict[str, Any] = {}
    if path:
        try:
            import yaml

            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path!r}: {exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path!r} is not valid YAML: {exc}".splitlines()[0]) from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path!r} must hold a mapping at the top level")
    known = {"root", "warehouse", "storage_options", "spark", "topics", "loads",
             "compaction", "retention", "quality", "catalog"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {path!r}; expected some of {sorted(known)}")
    spark = data.get("spark") or {}
    if not isinstance(spark, dict):
        raise ConfigError("'spark' must be a mapping like {master: 'local[*]', conf: {...}}")
    loads = data.get("loads") or []
    if not isinstance(loads, list) or not all(isinstance(x, dict) and "topic" in x for x in loads):
        raise ConfigError("'loads' must be a list of mappings like {topic: t, table: name}")
    topics = data.get("topics") or {}
    if not isinstance(topics, dict):
        raise ConfigError("'topics' must be a mapping like {orders: {partitions: 3, config: {...}}}")
    for name, spec in topics.items():
        _check_topic_spec(name, spec)
    for key in ("storage_options", "compaction", "retention", "quality"):
        _mapping(data, key, "{key: value, ...}")
    if not isinstance(spark.get("conf") or {}, dict):
        raise ConfigError("'spark.conf' must be a mapping like {spark.sql.shuffle.partitions: '8'}")
    return Config(
        root=resolve_url(_url("--root", root, os.environ.get("KAFKASTORE_ROOT") or None,
                              _text(data, "root"), DEFAULT_ROOT)),
        warehouse=resolve_url(_url("--warehouse", warehouse, os.environ.get("KAFKASTORE_WAREHOUSE") or None,
                                   _text(data, "warehouse"), DEFAULT_WAREHOUSE)),
        storage_options=dict(data.get("storage_options") or {}),
        spark_master=os.environ.get("KAFKASTORE_SPARK_MASTER") or _text(spark, "master", "spark.master"),
        spark_conf={str(k): str(v) for k, v in (spark.get("conf") or {}).items()},
        topics={str(k): dict(v or {}) for k, v in topics.items()},
        loads=[dict(x) for x in loads],
        compaction=dict(data.get("compaction") or {}),
        retention=dict(data.get("retention") or {}),
        quality=dict(data.get("quality") or {}),
        catalog=_catalog(data.get("catalog")),
        source=path,
    )


def _catalog(value: Any) -> dict[str, Any]:
    """The ``catalog:`` section: pyiceberg catalog properties (a mapping of scalars)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("'catalog' must be a mapping of pyiceberg catalog properties like "
                          "{type: rest, uri: 'http://...'}")
    return {str(k): v for k, v in value.items()}


def _text(data: dict, key: str, name: str | None = None) -> str | None:
    """``data[key]`` if it is a string (None if absent); a ConfigError naming the key if not."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"'{name or key}' in the config file must be a string, "
                          f"got {type(value).__name__} {value!r}")
    return value


def _mapping(data: dict, key: str, shape: str) -> None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"'{key}' in the config file must be a mapping like {shape}, "
                          f"got {type(value).__name__} {value!r}")


def _url(flag: str, explicit: str | None, env: str | None, from_file: str | None,
         default: str) -> str:
    """The first setting given, in precedence order. An empty one is an error, never a
    silent fall-through to the demo default."""
    for where, value in ((flag, explicit), ("the environment", env), ("the config file", from_file)):
        if value is not None:
            if not value.strip():
                raise ConfigError(f"{flag} is empty (from {where}): give a URL like "
                                  f"file:///data/log or s3://bucket/prefix")
            return value
    return default


def _check_topic_spec(name, spec) -> None:
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise ConfigError(f"topic {name!r} in the config file must be a mapping like "
                          f"{{partitions: 3, config: {{...}}}}, got {type(spec).__name__} {spec!r}")
    partitions = spec.get("partitions", 1)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"topic {name!r} in the config file: partitions must be a positive "
                          f"integer, got {partitions!r}")
    config = spec.get("config")
    if config is not None and not isinstance(config, dict):
        raise ConfigError(f"topic {name!r} in the config file: config must be a mapping of "
                          f"Kafka topic configs, got {type(config).__name__} {config!r}")
