"""kafkastore: Kafka-format logs (record batch v2 segments) on object storage.

This package is the log itself and never imports Spark or Airflow; the Spark
jobs live in :mod:`pipelines`.
"""

__version__ = "0.1.0"
