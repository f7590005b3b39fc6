-- How far each table is behind the topics it loads (see sql/views/load_lag.sql),
-- worst first.
--   kafkastore sql --file sql/examples/load_lag.sql --format jsonl
SELECT `table`, topic, partition, committed_offset, high_watermark, lag, lost, last_commit_time
FROM load_lag
ORDER BY lag DESC, `table`, topic, partition
