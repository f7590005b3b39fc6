"""Writes into topics: ``df.write`` / ``writeStream.format("kafkastore")``. The Spark side
(options, the tasks' writers) is :mod:`.writer`; the protocol that makes a job's output
visible exactly once, all partitions or none, is :mod:`.commit` (no Spark)."""
