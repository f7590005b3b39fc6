"""Spark batch jobs over kafkastore logs: the data source, loads, compaction, retention, SQL.

The jobs' old flat module paths are served from one table (:mod:`pipelines.old_paths`).
"""

from kafkastore.old_paths import install
from pipelines.old_paths import OLD_PATHS

install(OLD_PATHS)
