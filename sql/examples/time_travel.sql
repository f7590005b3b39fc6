-- Time travel: run any query against a table as it was. The snapshot is chosen
-- on the command line, not in SQL (Spark here has no Iceberg catalog):
--   kafkastore sql --file sql/examples/time_travel.sql --as-of-timestamp 2024-01-01T01:00:00Z
--   kafkastore sql --file sql/examples/time_travel.sql --as-of-snapshot <snapshot_id>
-- (snapshot ids: SELECT * FROM warehouse_snapshots). warehouse_offsets shows the
-- offsets committed as of that snapshot.
SELECT o.`table`, o.topic, o.partition, o.committed_offset, o.snapshot_id, o.committed_at,
       (SELECT count(*) FROM order_events) AS rows
FROM warehouse_offsets o
WHERE o.`table` = 'order_events'
ORDER BY o.topic, o.partition
