"""The warehouse: Apache Iceberg tables with Kafka offsets in each snapshot, Spark-free.

Read bottom up (DESIGN.md sections 5 and 10):

* :mod:`.properties`: every table property and snapshot summary key kafkastore writes
  or reads, and the ``validated`` tag (stdlib only: the DAG-safe job specs import it);
* :mod:`.catalog`: :class:`~.catalog.Warehouse` (catalogs from the config, table
  creation with its schema and partition spec, orphaned tables);
* :mod:`.snapshots`: a table's snapshots: ancestry, history, time travel and the
  choice of the snapshot a reader asks for;
* :mod:`.offsets`: the offsets protocol (offsets in snapshot summaries, the pure
  ``next_offsets`` rule, a run's snapshot);
* :mod:`.commit`: the exactly-once commit of a :class:`~.commit.KafkaCommit` on the one
  commit engine, data file entries, rewinds;
* :mod:`.reads`: planning and reading one snapshot, row filters;
* :mod:`.files` (Parquet data files, executor-safe), :mod:`.field_ids` (reads by field
  id) and :mod:`.iceberg_internals` (every use of pyiceberg's private API).

This ``__init__`` imports nothing, so ``import pipelines.warehouse.properties`` loads
neither pyiceberg nor pyarrow.
"""
