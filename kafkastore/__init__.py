"""kafkastore: Kafka-format logs (record batch v2 segments) on object storage.

This package is the log itself and never imports Spark or Airflow; the Spark
jobs live in :mod:`pipelines`. The old paths of moved modules are served from one table
(:mod:`kafkastore.old_paths`), not by files.
"""

from kafkastore.old_paths import OLD_PATHS, install

__version__ = "0.1.0"

install(OLD_PATHS)
