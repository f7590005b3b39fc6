"""The configuration file (``conf/kafkastore.yaml``): the log's part, and how it is resolved.

One YAML file serves the log and the jobs. This module reads the file and owns
what the log and the broker read: ``root``, ``storage_options`` and ``topics``.
The jobs' sections (``warehouse``, ``catalog``, ``spark``, ``loads``,
``compaction``, ``retention``, ``quality``) are parsed by :mod:`pipelines.spec.job_config`,
which extends :class:`Config`; here they are only known by name, so that the
same file is valid for both.

Precedence, highest first: command-line flags, environment
(``KAFKASTORE_ROOT``; the jobs add ``KAFKASTORE_WAREHOUSE``, ``KAFKASTORE_SPARK_MASTER``),
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

from ..errors import ConfigError

DEFAULT_ROOT = "file://./demo/log"

#: The sections the log reads.
LOG_SECTIONS = ("root", "storage_options", "topics")
#: The sections the jobs read (:mod:`pipelines.spec.job_config`); the log leaves them alone.
JOB_SECTIONS = ("warehouse", "catalog", "spark", "loads", "compaction", "retention", "quality")


@dataclass(frozen=True)
class Config:
    """The log's resolved settings; see the module docstring for the file's shape."""

    root: str = DEFAULT_ROOT
    storage_options: dict[str, Any] = field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None


def resolve_url(url: str) -> str:
    """Make ``file://relative`` and bare relative paths absolute against the working directory."""
    if "://" not in url:
        return "file://" + os.path.abspath(url)
    scheme, rest = url.split("://", 1)
    if scheme == "file" and not rest.startswith("/"):
        return "file://" + os.path.abspath(rest)
    return url


def read_config_file(path: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """``(path, data)``: the file named by ``path`` or ``KAFKASTORE_CONF`` (``{}`` if none),
    checked to be a mapping of known sections."""
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
    known = set(LOG_SECTIONS) | set(JOB_SECTIONS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {path!r}; expected some of {sorted(known)}")
    return path, data


def log_settings(data: dict[str, Any], *, path: str | None = None,
                 root: str | None = None) -> dict[str, Any]:
    """The log's fields of :class:`Config` from a read file's ``data`` and the overrides."""
    topics = data.get("topics") or {}
    if not isinstance(topics, dict):
        raise ConfigError("'topics' must be a mapping like {orders: {partitions: 3, config: {...}}}")
    for name, spec in topics.items():
        _check_topic_spec(name, spec)
    mapping(data, "storage_options", "{key: value, ...}")
    return dict(
        root=resolve_url(setting("--root", root, os.environ.get("KAFKASTORE_ROOT") or None,
                                 text(data, "root"), DEFAULT_ROOT)),
        storage_options=dict(data.get("storage_options") or {}),
        topics={str(k): dict(v or {}) for k, v in topics.items()},
        source=path,
    )


def load_config(path: str | None = None, *, root: str | None = None) -> Config:
    """Read the config file (if any) and apply environment and explicit overrides: the
    log's settings (the jobs' are :func:`pipelines.spec.job_config.load_config`)."""
    path, data = read_config_file(path)
    return Config(**log_settings(data, path=path, root=root))


def text(data: dict, key: str, name: str | None = None) -> str | None:
    """``data[key]`` if it is a string (None if absent); a ConfigError naming the key if not."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"'{name or key}' in the config file must be a string, "
                          f"got {type(value).__name__} {value!r}")
    return value


def mapping(data: dict, key: str, shape: str) -> None:
    """A ConfigError naming ``key`` unless ``data[key]`` is absent or a mapping."""
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"'{key}' in the config file must be a mapping like {shape}, "
                          f"got {type(value).__name__} {value!r}")


def setting(flag: str, explicit: str | None, env: str | None, from_file: str | None,
            default: str) -> str:
    """The first URL setting given, in precedence order. An empty one is an error, never a
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
