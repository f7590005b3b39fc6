-- Rows per table version and validation status, and how many rows the
-- `order_events_validated` view (only commits whose quality checks passed) holds.
--   kafkastore sql --file sql/examples/validated_vs_all.sql
SELECT version, validated, kind, sum(rows) AS rows, count(*) AS files
FROM warehouse_files
WHERE `table` = 'order_events'
GROUP BY version, validated, kind
ORDER BY version, kind;

SELECT (SELECT count(*) FROM order_events) AS all_rows,
       (SELECT count(*) FROM order_events_validated) AS validated_rows
