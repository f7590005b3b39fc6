"""Spark batch jobs over kafkastore logs: the data source, loads, compaction, retention, SQL."""
