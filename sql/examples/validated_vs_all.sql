-- The snapshots of `order_events` (main's history and the `validated` tag), and
-- how many rows `order_events` (main: everything loaded) and
-- `order_events_validated` (the `validated` tag: only loads whose quality checks
-- passed) hold.
--   kafkastore sql --file sql/examples/validated_vs_all.sql
SELECT snapshot_id, committed_at, kafkastore_operation, run_id, refs,
       summary['added-records'] AS added_records
FROM warehouse_snapshots
WHERE `table` = 'order_events'
ORDER BY committed_at, snapshot_id;

SELECT (SELECT count(*) FROM order_events) AS all_rows,
       (SELECT count(*) FROM order_events_validated) AS validated_rows
